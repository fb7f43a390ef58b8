// The FFN's gate activation act(x), selected by one define: SILU (llama, qwen2) or GELU_TANH
// (gemma3's gelu_pytorch_tanh). Included by matmul.wgsl's GLU variants and by
// elementwise.wgsl's unfused glu, so both paths compute the same function.

// The logistic function without overflow: exp only ever sees a non-positive argument, so
// no inf appears (WGSL lets implementations assume there are none).
fn sigmoid(x: f32) -> f32 {
    let e = exp(-abs(x));
    if (x >= 0.0) {
        return 1.0 / (1.0 + e);
    }
    return e / (1.0 + e);
}

#ifdef SILU
fn act(x: f32) -> f32 {
    return x * sigmoid(x);
}
#endif
#ifdef GELU_TANH
// 0.5·x·(1 + tanh(u)) = x·sigmoid(2u), u = sqrt(2/pi)·(x + 0.044715·x³). Avoids WGSL's
// tanh, whose precision is loose and which some backends compute as a ratio of exps
// that turns into inf/inf for large |u|.
fn act(x: f32) -> f32 {
    let u = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    return x * sigmoid(2.0 * u);
}
#endif
