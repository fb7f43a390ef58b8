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

// sigmoid and act(x) for the SILU / GELU_TANH defines, shared with the fused matmul.
#include "common/activation.wgsl"

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
