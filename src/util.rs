//! Small platform shims, kept in one place: a wall clock that works natively and in wasm.

/// Seconds since `start()`.
pub struct Clock {
    #[cfg(not(target_arch = "wasm32"))]
    start: std::time::Instant,
    #[cfg(target_arch = "wasm32")]
    start_ms: f64,
}

impl Clock {
    pub fn start() -> Clock {
        #[cfg(not(target_arch = "wasm32"))]
        return Clock {
            start: std::time::Instant::now(),
        };
        #[cfg(target_arch = "wasm32")]
        return Clock { start_ms: now_ms() };
    }

    pub fn seconds(&self) -> f64 {
        #[cfg(not(target_arch = "wasm32"))]
        return self.start.elapsed().as_secs_f64();
        #[cfg(target_arch = "wasm32")]
        return (now_ms() - self.start_ms) / 1000.0;
    }
}

/// `performance.now()` of the window or worker: 5 µs steps where the page is cross-origin
/// isolated, 100 µs otherwise. `Date.now()` ticks in whole milliseconds, which made a
/// 128-token prefill of ~9 ms read as 8, 9 or 10 (±11%); it stands in only where a global
/// has no `performance`.
#[cfg(target_arch = "wasm32")]
fn now_ms() -> f64 {
    use wasm_bindgen::JsCast;
    js_sys::Reflect::get(&js_sys::global(), &"performance".into())
        .ok()
        .and_then(|p| p.dyn_into::<web_sys::Performance>().ok())
        .map_or_else(js_sys::Date::now, |p| p.now())
}
