//! The boundary with the page. `api` and `error` are the types that cross it (plain serde
//! structs, no `JsValue`, so they build and are tested natively; `www/API.md` names them and
//! `tests/api_doc.rs` checks it against them). `bindings` is the wasm-bindgen API the page
//! calls, the only code that touches `JsValue`; it exists on wasm32 only.

pub mod api;
#[cfg(target_arch = "wasm32")]
mod bindings;
pub mod error;

#[cfg(target_arch = "wasm32")]
pub use bindings::Coco;
