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
        return Clock {
            start_ms: js_sys::Date::now(),
        };
    }

    pub fn seconds(&self) -> f64 {
        #[cfg(not(target_arch = "wasm32"))]
        return self.start.elapsed().as_secs_f64();
        #[cfg(target_arch = "wasm32")]
        return (js_sys::Date::now() - self.start_ms) / 1000.0;
    }
}
