// x' as two int8 levels per 32-element chunk, the form the int8 chunk matvec multiplies
// (common/dequant.wgsl's XChunk): staged by the matvec itself (matmul/matvec_chunk.wgsl), or
// written once by the kernel that produced x (the GLU before W_down, the attention merge
// before W_o) for a matvec that reads them with LEVELS_IN.
//
// A chunk's two int8 levels: x'' = d_a·a + d_b·b, a = round(x'/d_a), b the rounded remainder
// in steps of d_b = d_a / 254, d_a = max |x'| / 127 (reference::quant::int8_stage).
struct LevelWord {
    a: u32, // four elements' a, packed
    b: u32, // their b
    sum_a: i32,
    sum_b: i32,
}

// (d_a, 1 / d_a) of a chunk whose largest |x'| is mx.
fn chunk_scale(mx: f32) -> vec2<f32> {
    return vec2<f32>(mx / 127.0, select(0.0, 127.0 / mx, mx > 0.0));
}

// Four elements of a chunk of scale `scale` (chunk_scale) as their packed levels.
fn level_word(v: vec4<f32>, scale: vec2<f32>) -> LevelWord {
    let da = scale.x;
    let inv_b = 254.0 * scale.y;
    let qa = round(v * scale.y);
    let rest = fma(qa, vec4<f32>(-da), v);
    let ia = vec4<i32>(qa);
    let ib = vec4<i32>(clamp(round(rest * inv_b), vec4<f32>(-127.0), vec4<f32>(127.0)));
    return LevelWord(
        pack4xI8(ia),
        pack4xI8(ib),
        (ia.x + ia.y) + (ia.z + ia.w),
        (ib.x + ib.y) + (ib.z + ib.w),
    );
}

// Four elements as one level each, a = round(x'/d_a) (b and its sum zero): x'' = d_a·a, an
// element off by at most max|x'| / 254, llama.cpp's q8_1 activations. The form the dot-product
// GEMM multiplies (matmul/gemm_matrix_i8.wgsl's DOT4_TILES).
fn level_word_one(v: vec4<f32>, scale: vec2<f32>) -> LevelWord {
    let ia = vec4<i32>(round(v * scale.y));
    return LevelWord(pack4xI8(ia), 0u, (ia.x + ia.y) + (ia.z + ia.w), 0);
}

// (d_a, d_b, Σx'', 0): Σ of the levels, not of x', so the offsets multiply the same x'' as the
// quants do and the product is exactly W·x'' for the staged x''.
fn chunk_d(da: f32, sum_a: i32, sum_b: i32) -> vec4<f32> {
    let db = da / 254.0;
    return vec4<f32>(da, db, da * f32(sum_a) + db * f32(sum_b), 0.0);
}

