//! The one error shape the page sees: `{kind, message, …numbers}`. `kind` comes from the
//! engine's error variants (never from their text), so the page switches on it instead of
//! matching messages; `message` is the engine's own sentence, for people; the numbers are
//! those the message quotes, for the page to show or compare.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::bench::ProfileError;
use crate::chat::ChatError;
use crate::engine::{EngineError, LoadError};
use crate::gguf::{GgufError, Header};
use crate::gpu::GpuError;
use crate::kernels::KernelError;
use crate::model::ConfigError;
use crate::tokenizer::TokenizerError;

/// What kind of failure, for the page to act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// A valid request coco can't serve yet on this browser, GPU or model (no WebGPU, a limit,
    /// an architecture, a sampler setting, no chat template, no timestamp queries).
    NotYet,
    /// The file is broken or not a GGUF: no GPU would change that.
    InvalidFile,
    /// The GPU device is gone; the engine must be reopened.
    GpuLost,
    /// The GPU could not allocate what was within its limits.
    OutOfMemory,
    /// Another engine call is still running.
    Busy,
    /// Fetching the file failed (the page's own errors; the engine never fetches).
    Network,
    /// The call itself was wrong: no model loaded, no load in progress, an unknown name,
    /// a prompt longer than the context, options of the wrong type.
    InvalidRequest,
    /// Anything else: a GPU validation error or a failed kernel check (a bug in coco).
    Internal,
}

/// An error as the page receives it (thrown as a JS `Error` with these fields on it).
#[derive(Clone, Debug, Serialize)]
pub struct PageError {
    pub kind: ErrorKind,
    pub message: String,
    /// With `not_yet`: the setting this GPU can't run (`gemm`), where a setting is the cause
    /// and not the browser or the model.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setting: Option<&'static str>,
    /// The numbers the message quotes, by name (see `www/API.md` for the names).
    #[serde(flatten)]
    pub numbers: BTreeMap<&'static str, f64>,
}

impl PageError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> PageError {
        PageError {
            kind,
            message: message.into(),
            setting: None,
            numbers: BTreeMap::new(),
        }
    }

    pub fn with(mut self, name: &'static str, value: impl Into<f64>) -> PageError {
        self.numbers.insert(name, value.into());
        self
    }

    pub fn busy() -> PageError {
        PageError::new(
            ErrorKind::Busy,
            "busy: the engine is still running the previous call (stop it first)",
        )
    }

    pub fn invalid_request(message: impl Into<String>) -> PageError {
        PageError::new(ErrorKind::InvalidRequest, message)
    }

    pub fn lost(why: &str) -> PageError {
        PageError::new(
            ErrorKind::GpuLost,
            format!("the GPU device was lost: {why}"),
        )
    }

    /// An error that may be the effect of a lost device: the loss is what really happened.
    pub fn or_lost(self, lost: Option<String>) -> PageError {
        match lost {
            Some(why) if self.kind != ErrorKind::GpuLost => PageError::lost(&why),
            _ => self,
        }
    }
}

fn message(e: &impl std::fmt::Display) -> String {
    e.to_string()
}

impl From<GgufError> for PageError {
    fn from(e: GgufError) -> PageError {
        PageError::new(ErrorKind::InvalidFile, message(&e))
    }
}

impl From<ConfigError> for PageError {
    fn from(e: ConfigError) -> PageError {
        let kind = if e.is_not_yet() {
            ErrorKind::NotYet
        } else {
            ErrorKind::InvalidFile
        };
        PageError::new(kind, message(&e))
    }
}

impl From<TokenizerError> for PageError {
    fn from(e: TokenizerError) -> PageError {
        let kind = match e {
            TokenizerError::UnsupportedModel(_) | TokenizerError::UnsupportedPre(_) => {
                ErrorKind::NotYet
            }
            TokenizerError::Metadata(_)
            | TokenizerError::LengthMismatch { .. }
            | TokenizerError::IdOutOfRange { .. }
            | TokenizerError::Invalid { .. }
            | TokenizerError::Regex(_) => ErrorKind::InvalidFile,
        };
        PageError::new(kind, message(&e))
    }
}

impl From<GpuError> for PageError {
    fn from(e: GpuError) -> PageError {
        let mut setting = None;
        let kind = match e {
            // No adapter or no device: WebGPU is there in name only.
            GpuError::NoAdapter(_)
            | GpuError::AdapterNameNotFound(..)
            | GpuError::RequestDevice(_) => ErrorKind::NotYet,
            // WebGPU works, but not with this setting.
            GpuError::Unsupported { setting: name, .. } => {
                setting = Some(name);
                ErrorKind::NotYet
            }
            GpuError::Lost(_) => ErrorKind::GpuLost,
            GpuError::OutOfMemory(_) => ErrorKind::OutOfMemory,
            GpuError::Readback(_) | GpuError::Dispatch { .. } | GpuError::Validation(_) => {
                ErrorKind::Internal
            }
        };
        PageError {
            setting,
            ..PageError::new(kind, message(&e))
        }
    }
}

impl From<KernelError> for PageError {
    fn from(e: KernelError) -> PageError {
        match e {
            KernelError::Gpu(g) => g.into(),
            KernelError::Shape { .. } => PageError::new(ErrorKind::Internal, message(&e)),
        }
    }
}

impl From<EngineError> for PageError {
    fn from(e: EngineError) -> PageError {
        match e {
            EngineError::Kernel(k) => k.into(),
            EngineError::Gpu(g) => g.into(),
            EngineError::ContextFull { needed, context } => PageError::invalid_request(message(&e))
                .with("needed", needed)
                .with("context", context),
            EngineError::BadToken { id, vocab } => PageError::invalid_request(message(&e))
                .with("id", id)
                .with("vocab", vocab),
            // Every refused sampler setting is outside what the GPU sampler does yet.
            EngineError::Sampler(_) => PageError::new(ErrorKind::NotYet, message(&e)),
        }
    }
}

impl From<LoadError> for PageError {
    fn from(e: LoadError) -> PageError {
        match e {
            LoadError::Gguf(g) => g.into(),
            LoadError::Config(c) => c.into(),
            LoadError::Tokenizer(t) => t.into(),
            LoadError::NotSupported(_) => PageError::new(ErrorKind::NotYet, message(&e)),
            LoadError::Invalid(_) | LoadError::Incomplete(_) => {
                PageError::new(ErrorKind::InvalidFile, message(&e))
            }
            LoadError::Gpu(g) => {
                // The kind of the GPU error, the message that says it happened in the load.
                let text = format!("while uploading the weights: {g}");
                PageError::new(PageError::from(g).kind, text)
            }
        }
    }
}

impl From<ProfileError> for PageError {
    fn from(e: ProfileError) -> PageError {
        match e {
            ProfileError::NoTimestampQuery => PageError::new(ErrorKind::NotYet, message(&e)),
            ProfileError::Engine(inner) => inner.into(),
        }
    }
}

impl From<ChatError> for PageError {
    fn from(e: ChatError) -> PageError {
        let kind = match e {
            // The template refuses this conversation: the call is what needs changing.
            ChatError::Raised(_) | ChatError::EmptyConversation => ErrorKind::InvalidRequest,
            // A template (or a date it asks for) that coco's Jinja can't run.
            ChatError::Metadata(_)
            | ChatError::Syntax { .. }
            | ChatError::Render { .. }
            | ChatError::Date(_) => ErrorKind::NotYet,
        };
        PageError::new(kind, message(&e))
    }
}

/// A GPU error while the weights stream in (the device's uncaptured error: an allocation
/// that failed, or a validation message), with the sizes that explain it.
pub fn gpu_load_error(error: GpuError, header: Option<&Header>, max_binding: u64) -> PageError {
    let (oom, what) = match error {
        GpuError::OutOfMemory(what) => (true, what),
        GpuError::Validation(what) => (false, what),
        other => return other.into(),
    };
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64);
    let largest = header.and_then(|h| Some((h, h.tensors.iter().max_by_key(|t| t.n_bytes)?)));
    let sizes = largest.map_or_else(
        || "no header yet".to_string(),
        |(h, t)| {
            format!(
                "{} of weights in {} tensors, the largest `{}` {}; this adapter's limit per buffer is {}",
                mib(h.total_tensor_bytes()),
                h.tensors.len(),
                t.name,
                mib(t.n_bytes),
                mib(max_binding),
            )
        },
    );
    let mut e = if oom {
        PageError::new(
            ErrorKind::OutOfMemory,
            format!(
                "out of GPU memory: the GPU could not allocate this model's weights ({sizes}); \
                 they are within the adapter's limits, but it could not provide that much. \
                 The download was stopped. ({what})"
            ),
        )
    } else {
        PageError::new(
            ErrorKind::Internal,
            format!("the GPU refused this model's weights ({sizes}): {what}"),
        )
    };
    if let Some((h, t)) = largest {
        e = e
            .with("weight_bytes", h.total_tensor_bytes() as f64)
            .with("tensors", h.tensors.len() as f64)
            .with("largest_tensor_bytes", t.n_bytes as f64);
    }
    e.with("max_binding_bytes", max_binding as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_follow_variants() {
        let not_yet: PageError = ConfigError::UnsupportedArch("mamba".into()).into();
        assert_eq!(not_yet.kind, ErrorKind::NotYet);
        let broken: PageError = ConfigError::Invalid("heads 0".into()).into();
        assert_eq!(broken.kind, ErrorKind::InvalidFile);
        let lost: PageError = LoadError::Gpu(GpuError::Lost("destroyed".into())).into();
        assert_eq!(lost.kind, ErrorKind::GpuLost);
        let oom: PageError = GpuError::OutOfMemory("Out of Memory".into()).into();
        assert_eq!(oom.kind, ErrorKind::OutOfMemory);
        let invalid: PageError = GpuError::Validation("Out of Memory".into()).into();
        assert_eq!(
            invalid.kind,
            ErrorKind::Internal,
            "the variant decides, not the text"
        );
        let full: PageError = EngineError::ContextFull {
            needed: 9,
            context: 8,
        }
        .into();
        assert_eq!(full.kind, ErrorKind::InvalidRequest);
        assert_eq!(full.numbers["needed"], 9.0);
        assert_eq!(
            PageError::from(ProfileError::NoTimestampQuery).kind,
            ErrorKind::NotYet
        );
    }

    #[test]
    fn a_loss_overrides_what_it_caused() {
        let e = PageError::new(ErrorKind::Internal, "readback failed").or_lost(Some("gone".into()));
        assert_eq!(e.kind, ErrorKind::GpuLost);
        assert!(e.message.contains("gone"));
    }

    #[test]
    fn a_setting_the_gpu_cant_run_is_named() {
        let e: PageError = GpuError::Unsupported {
            setting: "gemm",
            why: "not yet: gemm=4x8h … needs shader-f16".into(),
        }
        .into();
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["kind"], "not_yet");
        assert_eq!(json["setting"], "gemm");
        assert_eq!(json["message"], "not yet: gemm=4x8h … needs shader-f16");
        let no_device: PageError = GpuError::RequestDevice("lost".into()).into();
        let json = serde_json::to_value(&no_device).unwrap();
        assert!(json.get("setting").is_none(), "{json}");
    }

    #[test]
    fn numbers_sit_beside_kind_and_message() {
        let e = gpu_load_error(GpuError::OutOfMemory("Out of Memory".into()), None, 1 << 20);
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(json["kind"], "out_of_memory");
        assert_eq!(json["max_binding_bytes"], 1048576.0);
    }
}
