// The portable tile kernel (every device; what browsers run; TILED, included by matmul.wgsl
// after matmul/tiles.wgsl): thread (tx, ty) accumulates its 16 outputs in f32, so each vec4
// read from workgroup memory feeds 4 dot products.
// Workgroup memory is K-major (vec4 j of row n at [j · 64 + n]): the 16 threads reading a tile
// row take consecutive vec4, so no bank padding is needed and both tiles fit in 16 KB,
// WebGPU's guaranteed workgroup storage.
var<workgroup> wt: array<vec4<f32>, 8u * TILE_N>; // [8][TILE_N]: a dequantized 32-wide W chunk
var<workgroup> xt: array<vec4<f32>, 8u * TILE_T>; // [8][TILE_T]: the x' chunk

// rsqrt(mean(x²) + eps) of tile token `tok`, from the Σ x² of its 4 staging threads (left in
// xt[·].x after the K loop), or 1 without NORM.
fn token_scale(tok: u32) -> f32 {
#ifdef NORM
    let s = xt[tok * 4u].x + xt[tok * 4u + 1u].x + xt[tok * 4u + 2u].x + xt[tok * 4u + 3u].x;
    return inverseSqrt(s / f32(p.k) + p.eps);
#else
    return 1.0;
#endif
}

@compute @workgroup_size(256)
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
) {
    let g = wid.x + wid.y * nwg.x;
    if (g >= p.groups) {
        return;
    }
    let t0 = wid.z * TILE_T;
    let tx = li % 16u;
    let ty = li / 16u;
    let rg = row_group(g);
    let range = k_range(g);
    let sr = li / 4u; // the W row and the token this thread stages
    let q = li % 4u;  // … their elements 8q .. 8q + 7 of each chunk
    let staged = locate(rg * TILE_N + sr, TILE_N);
    let staged_live = live(staged);
    let t_stage = t0 + sr;
    var ss = 0.0;
    var acc0 = vec4<f32>(0.0); // token ty; vec4 lane i: slot tx + 16i
    var acc1 = vec4<f32>(0.0); // token ty + 16
    var acc2 = vec4<f32>(0.0); // token ty + 32
    var acc3 = vec4<f32>(0.0); // token ty + 48
    // Chunk c + 1's loads are issued before chunk c's arithmetic and only consumed when it
    // is staged, so their latency can overlap the FMAs. On the H200 it bought nothing
    // (BENCHMARKS.md, session 9: staging and workgroup-memory reads bound this kernel), but it
    // costs no workgroup memory, and GPUs with fewer workgroups in flight may need it.
    var w_next: array<vec4<f32>, 2>;
    var x_next: array<vec4<f32>, 2>;
    if (range.x < range.y) {
        if (staged_live) {
            w_next = dequant_w8(staged, 4u * range.x + q);
        }
        x_next = stage_x(t_stage, range.x, q, &ss);
    }
    for (var c = range.x; c < range.y; c++) {
        wt[(2u * q) * TILE_N + sr] = w_next[0];
        wt[(2u * q + 1u) * TILE_N + sr] = w_next[1];
        xt[(2u * q) * TILE_T + sr] = x_next[0];
        xt[(2u * q + 1u) * TILE_T + sr] = x_next[1];
        workgroupBarrier();
        if (c + 1u < range.y) {
            if (staged_live) {
                w_next = dequant_w8(staged, 4u * (c + 1u) + q);
            }
            x_next = stage_x(t_stage, c + 1u, q, &ss);
        }
#ifndef ABLATE_MMA
        for (var j = 0u; j < 8u; j++) {
            let a0 = wt[j * TILE_N + tx];
            let a1 = wt[j * TILE_N + tx + 16u];
            let a2 = wt[j * TILE_N + tx + 32u];
            let a3 = wt[j * TILE_N + tx + 48u];
            let at = array<vec4<f32>, 4>(
                vec4<f32>(a0.x, a1.x, a2.x, a3.x),
                vec4<f32>(a0.y, a1.y, a2.y, a3.y),
                vec4<f32>(a0.z, a1.z, a2.z, a3.z),
                vec4<f32>(a0.w, a1.w, a2.w, a3.w),
            );
            acc0 = mac4x(at, xt[j * TILE_T + ty], acc0);
            acc1 = mac4x(at, xt[j * TILE_T + ty + 16u], acc1);
            acc2 = mac4x(at, xt[j * TILE_T + ty + 32u], acc2);
            acc3 = mac4x(at, xt[j * TILE_T + ty + 48u], acc3);
        }
#endif
        workgroupBarrier();
    }
#ifdef SPLIT_K
    // Sum i of this thread is slot tx + 16(i % 4) of token ty + 16(i / 4).
    var v = array<f32, 16>(
        acc0.x, acc0.y, acc0.z, acc0.w, acc1.x, acc1.y, acc1.z, acc1.w,
        acc2.x, acc2.y, acc2.z, acc2.w, acc3.x, acc3.y, acc3.z, acc3.w,
    );
    var live = 0u;
    for (var j = 0u; j < 4u; j++) {
        if (t0 + ty + 16u * j < p.t) {
            live |= 0xfu << (4u * j);
        }
    }
    if (!split_merge(li, split_tile(wid.z, rg), g % p.splits, live, &v, &ss)) {
        return;
    }
    acc0 = vec4<f32>(v[0], v[1], v[2], v[3]);
    acc1 = vec4<f32>(v[4], v[5], v[6], v[7]);
    acc2 = vec4<f32>(v[8], v[9], v[10], v[11]);
    acc3 = vec4<f32>(v[12], v[13], v[14], v[15]);
#endif
#ifdef NORM
    xt[li] = vec4<f32>(ss, 0.0, 0.0, 0.0); // thread li staged token li / 4 (see token_scale)
    workgroupBarrier();
#endif
    store_tile(rg, tx, t0 + ty, ty, acc0);
    store_tile(rg, tx, t0 + ty + 16u, ty + 16u, acc1);
    store_tile(rg, tx, t0 + ty + 32u, ty + 32u, acc2);
    store_tile(rg, tx, t0 + ty + 48u, ty + 48u, acc3);
}
