// Elementwise kernels on flat f32 arrays, one invocation per element.
//
// Variants (the binding layout differs, so they are defines):
//   GLU + SILU        out = silu(gate) * up          (SwiGLU: llama, qwen2)
//   GLU + GELU_TANH   out = gelu_tanh(gate) * up     (GeGLU: gemma3's gelu_pytorch_tanh)
//   ADD               a += b                         (residual add, in place)

struct Params {
    n: u32,      // elements
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
#ifdef GLU
@group(0) @binding(1) var<storage, read> gate: array<f32>; // [T, ffn]
@group(0) @binding(2) var<storage, read> up: array<f32>; // [T, ffn]
@group(0) @binding(3) var<storage, read_write> out: array<f32>; // [T, ffn]
#else
@group(0) @binding(1) var<storage, read_write> a: array<f32>; // [T, dim]
@group(0) @binding(2) var<storage, read> b: array<f32>; // [T, dim]
#endif

const WG: u32 = 256u;

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

@compute @workgroup_size(WG)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    // Large arrays spill into y (65,535 workgroups per dimension).
    let i = (wid.y * groups.x + wid.x) * WG + lid;
    if (i >= p.n) {
        return;
    }
#ifdef GLU
    out[i] = act(gate[i]) * up[i];
#else
    a[i] = a[i] + b[i];
#endif
}
