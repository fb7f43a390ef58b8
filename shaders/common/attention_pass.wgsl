// What both single-pass attention kernels share (attention.wgsl's TILED and
// attention_coop.wgsl): the parameters, the inputs' bindings (each kernel binds `out` at 4 in
// its own element type), the mask's first visible key and the masked-score marker.
#include "common/softcap.wgsl"

struct Params {
    t: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32, // = HD; the pipeline is built per head_dim
    pos0: u32,
    window: u32, // 0 = no window
    scale: f32,
    softcap: f32, // > 0: scores <- softcap * tanh(score / softcap) (gemma2); 0 = none
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;       // [T, heads, HD / 4]
@group(0) @binding(2) var<storage, read> k_cache: array<vec4<f32>>; // [ctx, kv_heads, HD / 4]
@group(0) @binding(3) var<storage, read> v_cache: array<vec4<f32>>; // [ctx, kv_heads, HD / 4]

// Below any real score, marking masked ones; finite, because WGSL lets implementations
// assume no infinities.
const LOWEST: f32 = -3.0e38;

// First cache row that the query at position `pos` sees.
fn first_key(pos: u32) -> u32 {
    if (p.window > 0u && pos + 1u > p.window) {
        return pos + 1u - p.window;
    }
    return 0u;
}
