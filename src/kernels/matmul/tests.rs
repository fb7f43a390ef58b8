//! The matmul module's unit tests (labels, defines, shapes); the GPU comparisons are
//! tests/kernels_matmul.rs and tests/kernels_matmul_fused.rs.

use super::*;
use crate::gguf::GgmlType;
use crate::gpu::{compile_to_spirv, used_bindings};
use crate::kernels::elementwise::Activation;
use crate::kernels::rope::RopeLayout;

#[test]
fn labels_name_the_variant() {
    let key = MatmulKey::choose(
        DeviceKernels::with_matvec(MatmulVariant::MatvecWorkgroup),
        GgmlType::Q4_K,
        1,
        false,
        None,
    );
    assert_eq!(key.label(), "matmul_q4_k_matvec_wg256");
    let key = MatmulKey::choose(
        DeviceKernels::with_matvec(MatmulVariant::MatvecSubgroup),
        GgmlType::Q8_0,
        1,
        true,
        None,
    );
    assert_eq!(key.label(), "matmul_q8_0_matvec_sg256_bias");
    let key = MatmulKey::choose(
        DeviceKernels::with_matvec(MatmulVariant::MatvecSubgroup),
        GgmlType::BF16,
        64,
        false,
        None,
    );
    assert_eq!(key.label(), "matmul_bf16_tiled64x64");
    let key = MatmulKey {
        norm: true,
        fusion: Fusion::Glu(Activation::GeluTanh),
        ..MatmulKey::choose(
            DeviceKernels::with_matvec(MatmulVariant::MatvecWorkgroup),
            GgmlType::Q6_K,
            1,
            false,
            None,
        )
    };
    assert_eq!(key.label(), "matmul_q6_k_matvec_wg256_glu_gelu_tanh_norm");
    let key = MatmulKey {
        norm: true,
        fusion: Fusion::Qkv,
        ..MatmulKey::choose(
            DeviceKernels::with_matvec(MatmulVariant::MatvecSubgroup),
            GgmlType::Q5_0,
            1,
            true,
            None,
        )
    };
    assert_eq!(key.label(), "matmul_q5_0_matvec_sg256_qkv_norm_bias");
    // CPU adapters keep the row-per-invocation matvec even for prefill-sized steps.
    let key = MatmulKey::choose(
        DeviceKernels::with_matvec(MatmulVariant::MatvecRows),
        GgmlType::Q8_0,
        64,
        false,
        None,
    );
    assert_eq!(key.label(), "matmul_q8_0_matvec_rows256");
}

/// The workgroup memory wgpu's default limits allow (and the H200's Vulkan driver offers):
/// the most a kernel may use.
const WORKGROUP_BYTES: u32 = 48 * 1024;

/// The GLU that writes W_down's x' levels and the W_down that reads them (with and without
/// split K), for every type with an int8 dot product; every other product refuses levels.
#[test]
fn levels_variants_compile_to_spirv() {
    let chunk = |ty, variant, fusion, norm, splits, levels| MatmulKey {
        ty,
        variant,
        bias: false,
        norm,
        fusion,
        stage_k: 0,
        splits,
        levels,
        x16: false,
        sg64: false,
        vec_stage: false,
        coop8: false,
        tokens_first: false,
        wide_f16: false,
    };
    for ty in GgmlType::SUPPORTED
        .into_iter()
        .filter(|&ty| has_int8_dot(ty))
    {
        let glu = Fusion::Glu(Activation::Silu);
        let emit = chunk(
            ty,
            MatmulVariant::MatvecChunkWide(64),
            glu,
            true,
            1,
            XLevels::Emit,
        )
        .staged(4096, 49152);
        let read = |splits| {
            let variant = MatmulVariant::MatvecChunk;
            chunk(ty, variant, Fusion::None, false, splits, XLevels::Read)
        };
        let keys = [emit, read(1), read(4)];
        if !keys.iter().all(|k| k.int8()) {
            continue; // int8 levels are off on this machine (MatvecShape::int8)
        }
        for key in keys {
            compile_to_spirv(&key.label(), &key.source().unwrap());
        }
        for refused in [
            // an emitter needs workgroups of whole chunks of outputs
            chunk(
                ty,
                MatmulVariant::MatvecChunkWide(32),
                glu,
                true,
                1,
                XLevels::Emit,
            ),
            // a reader's x' is not normed, and it is not a GLU
            chunk(
                ty,
                MatmulVariant::MatvecChunk,
                Fusion::None,
                true,
                1,
                XLevels::Read,
            ),
            chunk(ty, MatmulVariant::MatvecChunk, glu, false, 1, XLevels::Read),
            chunk(
                ty,
                MatmulVariant::MatvecSubgroup,
                Fusion::None,
                false,
                1,
                XLevels::Read,
            ),
        ] {
            assert!(refused.defines().is_err(), "{}", refused.label());
        }
    }
}

/// The subgroup matvecs' forms (`subgroup_matvec_forms`: the chunk matvec and the lane-per-8
/// matvec in every fusion, norm, split and x'-levels form) compile to SPIR-V for every type, as
/// the browser check compiles them in Tint.
#[test]
fn subgroup_matvec_forms_compile() {
    for ty in GgmlType::SUPPORTED {
        let forms = subgroup_matvec_forms(ty);
        assert!(forms.len() >= 9, "{ty:?}: {} forms", forms.len());
        for k in &forms {
            compile_to_spirv(&k.label(), &k.source().unwrap());
        }
    }
}

/// Every weight type: lavapipe has no cooperative matrices, so this is the only place the
/// GEMM's staging of each dequantizer is compiled.
#[test]
fn cooperative_matrix_gemm_compiles_to_spirv_in_every_fusion() {
    for (ty, variant) in GgmlType::SUPPORTED.into_iter().flat_map(|ty| {
        [
            (ty, MatmulVariant::TiledCoop),
            (ty, MatmulVariant::Coop128),
            (ty, MatmulVariant::CoopStream(16)),
        ]
    }) {
        // (splits, x16, sg64): x' staged by the tiles or prestaged (X16), split K or not, and
        // for the 128-token tiles 64 × 64 per subgroup (SG64; it doesn't split). The
        // short-step tiles always read it prestaged, and don't split.
        let combos: &[(u32, bool, bool)] = if matches!(variant, MatmulVariant::CoopStream(_)) {
            &[(1, true, false)]
        } else if variant == MatmulVariant::TiledCoop {
            &[
                (1, false, false),
                (1, true, false),
                (3, false, false),
                (3, true, false),
            ]
        } else {
            &[
                (1, false, false),
                (1, true, false),
                (1, true, true),
                (3, true, false),
            ]
        };
        for (fusion, norm, bias) in [
            (Fusion::None, false, false),
            (Fusion::None, false, true),
            (Fusion::Glu(Activation::Silu), true, false),
            (Fusion::Qkv, true, true),
        ] {
            // Each with the staged chunks as f16 scalars and as vec4<f16> (VEC_STAGE).
            // And every one with 8 × 8 blocks on subgroups of 8 (COOP8, lavapipe's).
            let combos = combos
                .iter()
                .flat_map(|&(s, x, g)| [(s, x, g, false), (s, x, g, true)])
                .flat_map(|(s, x, g, v)| [(s, x, g, v, false), (s, x, g, v, true)]);
            for (splits, x16, sg64, vec_stage, coop8) in combos {
                let variant = match variant {
                    MatmulVariant::CoopStream(_) => {
                        MatmulVariant::CoopStream(if coop8 { 8 } else { 16 })
                    }
                    v => v,
                };
                let key = MatmulKey {
                    ty,
                    variant,
                    bias,
                    norm,
                    fusion,
                    stage_k: 0,
                    splits,
                    levels: XLevels::Staged,
                    x16,
                    sg64,
                    vec_stage,
                    coop8,
                    tokens_first: splits == 3,
                    wide_f16: false,
                };
                let source = key.source().unwrap();
                assert!(source.contains("coopMultiplyAdd"), "{}", key.label());
                assert_eq!(
                    source.contains("alias CoopA = coop_mat8x8<f16, A>;"),
                    coop8,
                    "{}",
                    key.label()
                );
                assert_eq!(
                    source.contains("@workgroup_size(128)"),
                    sg64,
                    "{}",
                    key.label()
                );
                assert_eq!(
                    source.contains("@binding(B_NORM)"),
                    norm && !x16,
                    "{}",
                    key.label()
                );
                assert_eq!(
                    source.contains("alias StagedHalf = vec4<f16>;"),
                    vec_stage,
                    "{}",
                    key.label()
                );
                let bytes = compile_to_spirv(&key.label(), &source);
                if key.half_w() && variant == MatmulVariant::Coop128 && x16 && !sg64 {
                    // The next chunk's words held as loaded and decoded as loaded, whichever
                    // COCO_COOP_RAW_W picked.
                    let mut defines = key.defines().unwrap();
                    let held = defines.contains(&"RAW_W");
                    defines.retain(|d| *d != "RAW_W");
                    if !held {
                        defines.push("RAW_W");
                    }
                    let other = key.source_for(defines).unwrap();
                    let label = format!("{} (RAW_W {})", key.label(), !held);
                    assert!(
                        compile_to_spirv(&label, &other) <= WORKGROUP_BYTES,
                        "{label}"
                    );
                }
                // Split K merged by the dispatch after (SPLIT_PASS: the 128-token tiles by
                // default, the 64-token ones with COCO_COOP64_SPLIT_PASS=1): the product, and
                // its merge with the same declared bindings (the host binds both in that
                // layout), each binding read by one of the two, no workgroup memory.
                if splits > 1 && x16 && !sg64 {
                    let mut defines = key.defines().unwrap();
                    if !defines.contains(&"SPLIT_PASS") {
                        defines.push("SPLIT_PASS");
                    }
                    let product = key.source_for(defines.clone()).unwrap();
                    let label = format!("{} (split pass)", key.label());
                    assert!(
                        compile_to_spirv(&label, &product) <= WORKGROUP_BYTES,
                        "{label}"
                    );
                    defines.push("MERGE_PASS");
                    let merge = key.source_for(defines).unwrap();
                    assert_eq!(compile_to_spirv(&format!("{label} merge"), &merge), 0);
                    let declared = crate::gpu::declared_bindings(&product);
                    assert_eq!(crate::gpu::declared_bindings(&merge), declared);
                    assert_eq!(declared.len() as u32, key.layout().count + 1, "{label}");
                    let mut used = used_bindings(&product);
                    used.extend(used_bindings(&merge));
                    used.sort_by_key(|e| e.binding);
                    used.dedup();
                    assert_eq!(used, declared, "{label}");
                }
                // What the device check and the prestage check ask of a device, and the 48
                // KiB the H200's browser and Vulkan driver give.
                let needs = key
                    .prestage_workgroup_bytes()
                    .unwrap_or(crate::gpu::COOP_GEMM_WORKGROUP_BYTES);
                assert!(
                    bytes <= needs && needs <= WORKGROUP_BYTES,
                    "{}: {bytes} bytes of workgroup memory (declared: {needs})",
                    key.label()
                );
            }
        }
    }
    // Its per-token scales, and with X16 its f16 x' (portable WGSL, but only the tensor-core
    // GEMM reads them).
    for defines in [&[][..], &["NORM"], &["X16"], &["X16", "NORM"]] {
        compile_to_spirv(
            "matmul_token_scale",
            &super::token_scale::token_scale_source(defines),
        );
    }
    // The probe of the tensor cores' ceiling (coco probe), with and without its loads from
    // workgroup memory: 16 blocks of 16 × 16 f16 and a block of f32 zeros.
    for defines in [&["MMA"][..], &["MMA", "WG_LOADS"]] {
        let source = crate::kernels::probe::mma_source(defines);
        assert_eq!(
            compile_to_spirv("probe_mma", &source),
            16 * 256 * 2 + 256 * 4
        );
    }
    let key = MatmulKey::choose(
        DeviceKernels {
            matvec: MatmulVariant::MatvecSubgroup,
            tiled: MatmulVariant::TiledCoop,
            gemm: GemmChoice::Auto,
            coop_block: 16,
            wide_f16: false,
        },
        GgmlType::Q4_0,
        64,
        false,
        None,
    );
    // (`_h16`: Q4_0's levels decoded without integer conversions, unless switched off.)
    let h16 = if coop_half_w() { "_h16" } else { "" };
    assert_eq!(key.label(), format!("matmul_q4_0_coop64x64{h16}"));
    // A device with the tensor-core GEMM runs the 128 × 128 tiles; `tiled` keeps the 64 × 64
    // ones (the A/B baseline).
    assert_eq!(GemmChoice::Auto.pick_coop(), MatmulVariant::Coop128);
    assert_eq!(GemmChoice::Tiled.pick_coop(), MatmulVariant::TiledCoop);
    // Short steps: a product of >= COOP64_MAX_WEIGHTS weights keeps the split 128-token tiles,
    // a smaller one takes the 64-token tiles; past coop64_max_t every product keeps them.
    if std::env::var_os("COCO_COOP64_MAX_WEIGHTS").is_none()
        && std::env::var_os("COCO_COOP64_MAX_T").is_none()
    {
        let tensor_cores = DeviceKernels {
            tiled: MatmulVariant::Coop128,
            ..DeviceKernels::with_matvec(MatmulVariant::MatvecChunk)
        };
        let short = |k: u64, slots: u64, t: u32| {
            MatmulKey::choose(tensor_cores, GgmlType::Q4_0, t, false, None)
                .sized(k, slots, t, GemmChoice::Auto, false)
                .variant
        };
        // Llama-1B's gate/up (16,384 × 2,048) and Qwen-0.5B's W_o (896 × 896) at 32 tokens.
        assert_eq!(short(2048, 16384, 32), MatmulVariant::Coop128);
        assert_eq!(short(896, 896, 32), MatmulVariant::TiledCoop);
        assert_eq!(short(896, 896, COOP64_MAX_T + 1), MatmulVariant::Coop128);
        assert!(!coop64_takes(COOP64_MAX_T, COOP64_MAX_WEIGHTS, 1));
        assert!(coop64_takes(COOP64_MAX_T, COOP64_MAX_WEIGHTS - 1, 1));
    }
}

#[test]
fn layouts_number_bindings_in_host_order() {
    let key = |fusion, norm, bias| MatmulKey {
        ty: GgmlType::F16,
        variant: MatmulVariant::Tiled,
        bias,
        norm,
        fusion,
        stage_k: 0,
        splits: 1,
        levels: XLevels::Staged,
        x16: false,
        sg64: false,
        vec_stage: false,
        coop8: false,
        tokens_first: false,
        wide_f16: false,
    };
    // w, x, y, [norm_w], [bias]
    let l = key(Fusion::None, false, true).layout();
    assert_eq!((l.x, l.y, l.bias, l.count), (2, 3, 4, 4));
    let l = key(Fusion::None, true, true).layout();
    assert_eq!((l.norm, l.bias, l.count), (4, 5, 5));
    // w_gate, w_up, x, out, norm_w
    let l = key(Fusion::Glu(Activation::Silu), true, false).layout();
    assert_eq!((l.x, l.y, l.norm, l.count), (3, 4, 5, 5));
    // wq, wk, wv, x, q, k, v, norm_w, bq, bk, bv
    let l = key(Fusion::Qkv, true, true).layout();
    assert_eq!((l.x, l.y, l.norm, l.bias, l.count), (4, 5, 8, 9, 11));
    let l = key(Fusion::Qkv, false, true).layout();
    assert_eq!((l.bias, l.count), (8, 10));
    // wq, wk, wv, x, q, k_cache, v_cache, norm_w, [bq, bk, bv], inv_freq
    let rope = |layout, qk_norm| Fusion::QkvRope { layout, qk_norm };
    let l = key(rope(RopeLayout::Neox, false), true, true).layout();
    assert_eq!((l.norm, l.bias, l.rope, l.count), (8, 9, 12, 12));
    let l = key(rope(RopeLayout::Normal, false), true, false).layout();
    assert_eq!((l.rope, l.count), (9, 9));
    // ..., inv_freq, q_norm_w, k_norm_w, the epilogue scratch
    let l = key(rope(RopeLayout::Neox, true), true, false).layout();
    assert_eq!((l.rope, l.qkn, l.count), (9, 10, 12));
    let l = key(rope(RopeLayout::Normal, true), true, true).layout();
    assert_eq!((l.rope, l.qkn, l.count), (12, 13, 15));
}

#[test]
fn fold_keeps_each_dimension_under_the_limit() {
    assert_eq!(fold(10, 65535), [10, 1]);
    assert_eq!(fold(65536, 65535), [65535, 2]);
    assert_eq!(fold(262144 / 8 * 5, 65535), [65535, 3]);
}

#[test]
fn matvec_shape_parses_and_bounds_the_override() {
    let shape = |rows, unroll, rows_per_task, stage_x| MatvecShape {
        rows,
        unroll,
        rows_per_task,
        stage_x,
        chunk: MatvecShape::DEFAULT.chunk,
        int8: MatvecShape::DEFAULT.int8,
    };
    let default = MatvecShape::DEFAULT.stage_x;
    assert_eq!(MatvecShape::parse("8x2"), Some(shape(8, 2, 1, default)));
    assert_eq!(MatvecShape::parse("16x1x8"), Some(shape(16, 1, 8, default)));
    assert_eq!(
        MatvecShape::parse("8x1x2x0"),
        Some(shape(8, 1, 2, StageX::Never))
    );
    assert_eq!(
        MatvecShape::parse("8x1x2x2"),
        Some(shape(8, 1, 2, StageX::All))
    );
    assert_eq!(
        MatvecShape::parse("16x1x2x0x1"),
        Some(MatvecShape {
            chunk: true,
            ..shape(16, 1, 2, StageX::Never)
        })
    );
    assert_eq!(
        MatvecShape::parse("16x1x2x0x1x0"),
        Some(MatvecShape {
            chunk: true,
            int8: false,
            ..shape(16, 1, 2, StageX::Never)
        })
    );
    let bad = "8 8x3 8x4 8x0 12x2 8x2x8 32x2x16 8x2x3 8x2x4x3 8x2x4x1x2 8x2x4x1x1x2 8x2x4x1x1x1x1 ax2 8x2x";
    for bad in bad.split(' ').chain([""]) {
        assert_eq!(MatvecShape::parse(bad), None, "{bad}");
    }
    assert!(
        MatvecShape::parse(&format!("{}x{}x{}", SG_ROWS, MV_UNROLL, SG_ROWS_PER_TASK))
            .is_some_and(|s| s == MatvecShape::DEFAULT)
    );
}

#[test]
fn qkv_rope_compiles_for_the_matvecs_and_is_refused_for_tiles() {
    for variant in [
        MatmulVariant::MatvecWorkgroup,
        MatmulVariant::MatvecSubgroup,
        MatmulVariant::MatvecChunk,
        MatmulVariant::MatvecRows,
        MatmulVariant::Tiled,
    ] {
        for (layout, qk_norm) in [
            (RopeLayout::Normal, false),
            (RopeLayout::Neox, false),
            (RopeLayout::Neox, true),
        ] {
            let key = MatmulKey {
                ty: GgmlType::Q4_0,
                variant,
                bias: true,
                norm: true,
                fusion: Fusion::QkvRope { layout, qk_norm },
                stage_k: 0,
                splits: 1,
                levels: XLevels::Staged,
                x16: false,
                sg64: false,
                vec_stage: false,
                coop8: false,
                tokens_first: false,
                wide_f16: false,
            };
            if variant.is_tiled() {
                assert!(key.defines().is_err(), "{}", key.label());
            } else {
                // as a launch stages it (the chunk matvec's tile), with WebGPU's 16 KiB
                let key = key.staged(4096, 16384);
                compile_to_spirv(&key.label(), &key.source().unwrap());
            }
        }
    }
}

#[test]
fn every_variant_preprocesses() {
    for ty in GgmlType::SUPPORTED {
        for variant in [
            MatmulVariant::MatvecWorkgroup,
            MatmulVariant::MatvecSubgroup,
            MatmulVariant::Tiled,
            MatmulVariant::Wide(WideTile::new(4, 8)),
            MatmulVariant::Wide(WideTile::new(8, 4)),
            MatmulVariant::Wide(WideTile::new(4, 8).f16()),
            MatmulVariant::Wide(WideTile::new(4, 4).f16()),
        ] {
            for fusion in [Fusion::None, Fusion::Glu(Activation::Silu), Fusion::Qkv] {
                let half = matches!(variant, MatmulVariant::Wide(w) if w.half);
                let key = MatmulKey {
                    ty,
                    variant,
                    bias: fusion != Fusion::Glu(Activation::Silu),
                    norm: true,
                    fusion,
                    stage_k: 0,
                    splits: 1,
                    levels: XLevels::Staged,
                    x16: half,
                    sg64: false,
                    vec_stage: false,
                    coop8: false,
                    tokens_first: false,
                    wide_f16: half,
                };
                let src = key.source().unwrap();
                assert!(
                    src.contains("fn dequant32") && src.contains("fn main"),
                    "{}",
                    key.label()
                );
                if half {
                    // The f16 tiles (their held-word path for Q4_0 / Q5_0 / Q8_0) compile.
                    compile_to_spirv(&key.label(), &src);
                    assert_eq!(
                        src.contains("fn levels_raw"),
                        has_half8(ty),
                        "{}",
                        key.label()
                    );
                }
                if variant == MatmulVariant::MatvecSubgroup {
                    // the staged forms, with and without the norm, must compile too
                    for norm in [true, false] {
                        let key = MatmulKey {
                            norm,
                            stage_k: 2048,
                            splits: 1,
                            ..key
                        };
                        compile_to_spirv(&key.label(), &key.source().unwrap());
                    }
                }
            }
        }
    }
}

/// The portable tiles' choice on the Llama-3.2-1B and 8B shapes of a 512-token step (what
/// BENCHMARKS.md "session 16" measured), in f32 and in f16, and the fused Q/K/V's exception.
#[test]
fn wide_tiles_are_chosen_where_the_grid_stays_full() {
    let wide = |n, t| MatmulVariant::Wide(WideTile::new(n, t));
    let wide_f16 = |n, t| MatmulVariant::Wide(WideTile::new(n, t).f16());
    let auto = GemmChoice::Auto;
    for f16 in [false, true] {
        let want = |n, t| if f16 { wide_f16(n, t) } else { wide(n, t) };
        assert_eq!(auto.pick(2 * 8192, 512, f16), want(4, 8)); // 1B gate/up: 256 × 4 groups
        assert_eq!(auto.pick(2048, 512, f16), want(4, 4)); // 1B o, down: 32 × 8
        assert_eq!(auto.pick(4096, 512, f16), want(4, 8)); // 8B o, down: 64 × 4
        assert_eq!(auto.pick(2048, 100, f16), MatmulVariant::Tiled); // 32 × 2: too few for any
        assert_eq!(
            GemmChoice::Tiled.pick(1 << 20, 512, f16),
            MatmulVariant::Tiled
        );
        // A tile asked for by name keeps the precision it names.
        let forced = GemmChoice::Force(WideTile::new(8, 4));
        assert_eq!(forced.pick(64, 40, f16), wide(8, 4));
    }
    assert_eq!(
        GemmChoice::parse("8x4"),
        Some(GemmChoice::Force(WideTile::new(8, 4)))
    );
    assert_eq!(
        GemmChoice::parse("8x4h"),
        Some(GemmChoice::Force(WideTile::new(8, 4).f16()))
    );
    assert_eq!(GemmChoice::parse("8x4h").unwrap().name(), "8x4h");
    assert_eq!(GemmChoice::parse("8x8"), None);
    assert_eq!(GemmChoice::parse("8x8h"), None);
    let key = |fusion, wide_f16| MatmulKey {
        fusion,
        norm: true,
        wide_f16,
        ..MatmulKey::choose(DeviceKernels::PORTABLE, GgmlType::Q4_0, 512, false, None)
    };
    let glu = key(Fusion::Glu(Activation::Silu), false).sized(2048, 16384, 512, auto, false);
    assert_eq!(glu.label(), "matmul_q4_0_wide64x128_glu_silu_norm");
    let qkv = key(Fusion::Qkv, false).sized(4096, 6144, 512, auto, false);
    assert_eq!(qkv.variant, MatmulVariant::Tiled);
    // In f16 the fused Q/K/V takes the wide tiles too; the launch stages x' as f16 rows.
    let qkv = key(Fusion::Qkv, true)
        .sized(4096, 6144, 512, auto, false)
        .staged(4096, 16384);
    assert_eq!(qkv.label(), "matmul_q4_0_wideh64x128_qkv_norm_x16_h16_raw");
    let forced =
        key(Fusion::None, false).sized(4096, 64, 40, GemmChoice::Force(WideTile::new(8, 4)), false);
    assert_eq!(forced.label(), "matmul_q4_0_wide128x64_norm");
    // Every tile fits WebGPU's guaranteed 16 KiB of workgroup memory; the f32 tiles stage at
    // most one group of each tile per thread per chunk (the f16 ones loop: W_STAGES, X_STAGES).
    for w in WideTile::ALL {
        let (n, t) = w.tile();
        assert!((n + t) * w.chunk() * 4 <= 16384, "{w:?}");
        assert!(n.max(t) * w.chunk() / 8 <= 256, "{w:?}");
        let h = w.f16();
        assert!((n + t) * h.chunk() * 2 <= 16384, "{h:?}");
        assert_eq!(
            h.chunk(),
            32,
            "the f16 tiles flush their f16 sums per chunk of 32"
        );
    }
}

/// Which decode matvec the measured shapes get (BENCHMARKS.md "session 21"): the int8 chunk
/// matvec for K >= 2,048 and for the small models' LM heads, 64 or 32 slots per workgroup
/// where the grid stays full, the lane-per-8 matvec for the other short-K products and
/// for types without int8 levels.
#[test]
fn chunk_matvec_where_it_pays() {
    if [
        "COCO_MATVEC",
        "COCO_CHUNK",
        "COCO_CHUNK_MIN_K",
        "COCO_CHUNK_SPLITS",
    ]
    .iter()
    .any(|v| std::env::var_os(v).is_some())
    {
        println!("a tuning override is set: the default choice is not what runs");
        return;
    }
    let pick = |ty, k, slots| {
        MatmulKey::choose(
            DeviceKernels {
                matvec: MatmulVariant::MatvecChunk,
                ..DeviceKernels::PORTABLE
            },
            ty,
            1,
            false,
            None,
        )
        .sized(k, slots, 1, GemmChoice::Auto, false)
        .variant
    };
    use GgmlType::{F16, Q4_0, Q5_0, Q8_0};
    use MatmulVariant::{MatvecChunk, MatvecChunkWide, MatvecSubgroup};
    assert_eq!(pick(Q4_0, 4096, 2 * 14336), MatvecChunkWide(64)); // 8B gate/up: 448 groups
    assert_eq!(pick(Q4_0, 4096, 128256), MatvecChunkWide(64)); // 8B LM head
    assert_eq!(pick(Q4_0, 2048, 2 * 8192), MatvecChunkWide(32)); // 1B gate/up: 512 of 32
    assert_eq!(pick(Q4_0, 4096, 4096), MatvecChunk); // 8B W_o: 256 groups of 16
    assert_eq!(pick(Q8_0, 640, 262144), MatvecChunkWide(64)); // Gemma-270M LM head
    assert_eq!(pick(Q8_0, 896, 151936), MatvecChunkWide(64)); // Qwen-0.5B LM head
    assert_eq!(pick(Q5_0, 640, 2 * 2048), MatvecSubgroup); // Gemma-270M gate/up
    assert_eq!(pick(Q8_0, 256, 151936), MatvecSubgroup); // K below 512
    assert_eq!(pick(F16, 640, 262144), MatvecSubgroup); // no int8 levels for F16
}

/// A split chunk matvec's key: its label, define and one more binding (the context's scratch,
/// last), and the shader's counter region the same size as the host's bound.
#[test]
fn split_k_key_and_scratch_layout() {
    let key = MatmulKey {
        variant: MatmulVariant::MatvecChunk,
        norm: true,
        splits: 3,
        ..MatmulKey::choose(
            DeviceKernels::with_matvec(MatmulVariant::MatvecChunk),
            GgmlType::Q4_K,
            1,
            false,
            None,
        )
    };
    assert!(key.label().ends_with("_k3"), "{}", key.label());
    assert!(key.defines().unwrap().contains(&"SPLIT_K"));
    let unsplit = MatmulKey { splits: 1, ..key };
    assert_eq!(key.layout().count, unsplit.layout().count + 1);
    assert_eq!(key.layout().split, key.layout().count);
    let source = key.source().unwrap();
    assert!(
        source.contains(&format!("const SPLIT_COUNTERS: u32 = {SPLIT_COUNTERS}u;")),
        "matvec_chunk.wgsl's SPLIT_COUNTERS differs from select.rs's"
    );
    // Unset, the rule splits decode steps' long-K products over few row groups only.
    if chunk_splits_override().is_none() {
        let (min_k, max_groups, ways) = AUTO_SPLIT;
        let chunks = min_k / 32;
        assert_eq!(chunk_splits(56, 16, 152, 1), ways, "Qwen-0.5B's W_down");
        assert_eq!(chunk_splits(max_groups, 16, chunks, 1), ways);
        assert_eq!(
            chunk_splits(max_groups + 1, 16, chunks, 1),
            1,
            "a wider grid"
        );
        assert_eq!(
            chunk_splits(max_groups, 16, chunks - 1, 1),
            1,
            "a shorter K"
        );
        assert_eq!(chunk_splits(4, 16, chunks, 2), 1, "a two-token step");
    }
}

/// The tiles' split K: the rule's grid, its limits, and the shader's constants (the
/// scratch's layout) against the host's.
#[test]
fn tile_splits_grow_short_grids_and_match_the_shader() {
    if tile_split_target_override().is_none() {
        // The Llama-1B shape at 64 tokens: W_o and W_down 32 row groups, gate/up 256.
        assert_eq!(
            tile_splits(32, 1, 2048 / 32),
            8,
            "W_o: K = 2,048 gives 8 ranges of 8"
        );
        assert_eq!(tile_splits(32, 1, 8192 / 32), 16, "W_down: 512 workgroups");
        assert_eq!(tile_splits(256, 1, 2048 / 32), 2, "gate/up");
        assert_eq!(tile_splits(512, 1, 256), 1, "a full grid stays unsplit");
        assert_eq!(
            tile_splits(4, 1, 15),
            1,
            "fewer than two ranges of 8 chunks"
        );
        assert_eq!(tile_splits(1, 1, 4096), 512, "one tile, a long K");
    }
    let key = MatmulKey {
        ty: GgmlType::Q4_0,
        variant: MatmulVariant::Tiled,
        bias: false,
        norm: true,
        fusion: Fusion::None,
        stage_k: 0,
        splits: 4,
        levels: XLevels::Staged,
        x16: false,
        sg64: false,
        vec_stage: false,
        coop8: false,
        tokens_first: false,
        wide_f16: false,
    };
    assert!(key.label().ends_with("_k4"), "{}", key.label());
    let source = key.source().unwrap();
    assert!(
        source.contains(&format!("const SPLIT_COUNTERS: u32 = {SPLIT_COUNTERS}u;")),
        "tile_split.wgsl's SPLIT_COUNTERS differs from select.rs's"
    );
    assert_eq!(TILE_SPLIT_RECORD, 17 * 256);
    assert!(
        source.contains("const TILE_RECORD: u32 = 17u * 256u;"),
        "tile_split.wgsl's TILE_RECORD differs from select.rs's TILE_SPLIT_RECORD"
    );
    // Split K is in the 64 × 64 tiles, the chunk matvec, and the 128-token tensor-core tiles
    // with x' prestaged (not with 64 × 64 per subgroup).
    let wide = MatmulKey {
        variant: MatmulVariant::Wide(WideTile::new(4, 8)),
        ..key
    };
    assert!(wide.defines().is_err());
    let coop128 = MatmulKey {
        variant: MatmulVariant::Coop128,
        x16: true,
        ..key
    };
    let source = coop128.source().unwrap();
    assert!(source.contains("const COOP_RECORD: u32 = TILE_N * TILE_T;"));
    assert!(source.contains(&format!(
        "const TILE_N: u32 = {COOP_TILE}u;\nconst TILE_T: u32 = {COOP_TILE}u;"
    )));
    assert_eq!(COOP128_SPLIT_RECORD, (COOP_TILE * COOP_TILE) as u64);
    assert!(MatmulKey {
        sg64: true,
        ..coop128
    }
    .defines()
    .is_err());
    assert!(MatmulKey {
        x16: false,
        ..coop128
    }
    .defines()
    .is_err());
    // Its rule at 512 tokens (4 token tiles): the Llama-1B shape's W_o and W_down (16 row
    // groups) split 4 ways, its gate/up (128) not; the 8B's W_o (32) 2 ways.
    let coop = |groups: u64, chunks: u64| {
        super::select::grid_splits(
            groups * 4,
            chunks,
            COOP128_SPLIT_TARGET,
            COOP128_SPLIT_RECORD,
            COOP128_SPLIT_WORDS,
        )
    };
    assert_eq!(coop(16, 8192 / 32), 4);
    assert_eq!(coop(16, 2048 / 32), 4);
    assert_eq!(coop(128, 2048 / 32), 1);
    assert_eq!(coop(32, 4096 / 32), 2);
    // The 8B's Q/K/V at 512 tokens (192 tiles): 2 ways, in the larger scratch of a device with
    // these tiles.
    assert_eq!(coop(48, 4096 / 32), 2);
    // Where the target's ranges would pass the scratch, as many as fit: 48 tiles of 16 Ki-word
    // records in 4 Mi words hold 5 ranges (the target asks 22), of 64 Ki-word records 1.
    let fit = |target, record| {
        super::select::grid_splits(48, 8192 / 32, target, record, TILE_SPLIT_WORDS)
    };
    assert_eq!(fit(1024, 1 << 14), 5);
    assert_eq!(fit(240, 1 << 14), 5);
    assert_eq!(fit(1024, 1 << 16), 1);
}

/// The browser's int8 subgroup-matrix GEMM: its emulated form (dot4I8Packed for the matrix
/// builtins) and the dot-product tiles (`Dot4I8`) compile for every type with levels and every tile fusion, within the
/// workgroup memory the device check asks for with the matrix sums added; the browser's form
/// opens with its enables and the uniformity diagnostic turned off; types without levels
/// are refused by the defines and given the portable tiles by `sized`.
#[test]
fn the_int8_matrix_gemm_compiles_where_the_type_has_levels() {
    for ty in GgmlType::SUPPORTED {
        for fusion in [Fusion::None, Fusion::Glu(Activation::GeluTanh), Fusion::Qkv] {
            let forms = [
                (MatmulVariant::MatrixI8 { emulated: true }, 1),
                (MatmulVariant::MatrixI8 { emulated: true }, 3),
                (MatmulVariant::MatrixI8 { emulated: false }, 1),
                (MatmulVariant::MatrixI8 { emulated: false }, 3),
                (MatmulVariant::Dot4I8, 1),
                (MatmulVariant::Dot4I8, 3),
            ];
            for (matrix, splits) in forms {
                let emulated = matrix != MatmulVariant::MatrixI8 { emulated: false };
                let bias = fusion != Fusion::Glu(Activation::GeluTanh);
                let key = MatmulKey {
                    fusion,
                    norm: true,
                    splits,
                    ..MatmulKey::choose(DeviceKernels::PORTABLE, ty, 512, bias, Some(matrix))
                };
                if !has_levels8(ty) {
                    assert!(key.defines().is_err(), "{}", key.label());
                    let sized = key.sized(4096, 4096, 512, GemmChoice::Auto, false);
                    assert!(
                        matches!(sized.variant, MatmulVariant::Tiled | MatmulVariant::Wide(_)),
                        "{ty:?}: {:?}",
                        sized.variant
                    );
                    continue;
                }
                let src = key.source().unwrap();
                if emulated {
                    let bytes = compile_to_spirv(&key.label(), &src);
                    // The browser's form adds its 16 KiB of per-subgroup i32 sums.
                    assert!(
                        bytes + 16 * 1024 <= crate::gpu::MATRIX_I8_WORKGROUP_BYTES,
                        "{}: {bytes} bytes",
                        key.label()
                    );
                } else {
                    assert!(
                        src.starts_with(
                            "enable subgroups;\nenable chromium_experimental_subgroup_matrix;\n\
                             diagnostic(off, chromium.subgroup_matrix_uniformity);\n"
                        ),
                        "{}",
                        key.label()
                    );
                    assert!(src.contains("subgroupMatrixMultiplyAccumulate"));
                    assert!(!src.contains("fn chunk_sum"));
                }
            }
        }
    }
}

/// The diagnostic `COCO_ABLATE` ([`ablations`]): every kernel with the switches compiles with
/// each part left out and with all three.
#[test]
fn ablated_prefill_tiles_compile() {
    let all = [Ablation::Multiply, Ablation::Weights, Ablation::Activations];
    let variants = [
        (MatmulVariant::Tiled, false),
        (MatmulVariant::Wide(WideTile::new(4, 8)), false),
        (MatmulVariant::TiledCoop, true),
        (MatmulVariant::Coop128, true),
    ];
    for (variant, x16) in variants {
        for fusion in [Fusion::None, Fusion::Glu(Activation::Silu)] {
            let key = MatmulKey {
                ty: GgmlType::Q4_0,
                variant,
                bias: false,
                norm: !x16,
                fusion,
                stage_k: 0,
                splits: 1,
                levels: XLevels::Staged,
                x16,
                sg64: false,
                vec_stage: x16,
                coop8: false,
                tokens_first: false,
                wide_f16: false,
            };
            let parts: Vec<Vec<Ablation>> = all
                .iter()
                .map(|&a| vec![a])
                .chain(std::iter::once(all.to_vec()))
                .collect();
            for set in parts {
                let mut defines = key.defines().unwrap();
                defines.extend(set.iter().map(|a| a.define()));
                let src = key.source_for(defines).unwrap();
                compile_to_spirv(&format!("{} {set:?}", key.label()), &src);
            }
        }
    }
}
