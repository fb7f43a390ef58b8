// Gemma 2's soft-cap, cap·tanh(x / cap): attention scores (attn_logit_softcapping) and the
// final logits (final_logit_softcapping, in the LM head's store). Included by attention.wgsl
// and matmul.wgsl, so every path bends its values by the same function.
//
// tanh(u) = sign(u)·(1 − e)/(1 + e) with e = exp(−2|u|) ∈ (0, 1]: exp only sees a
// non-positive argument, so no inf appears (WGSL lets implementations assume there are none,
// and some backends compute the builtin tanh as a ratio of exps that overflows).
fn softcap(x: f32, cap: f32) -> f32 {
    let u = x / cap;
    let e = exp(-2.0 * abs(u));
    return cap * sign(u) * ((1.0 - e) / (1.0 + e));
}
