//! The tensor-core tiles' weight decode without integer conversions (`HALF_W`:
//! common/dequant.wgsl `half8`, for Q4_0, Q5_0 and Q8_0) on the GPU against the plain-Rust
//! reference: every element must be the reference's f32 weight (`reference::quant::dequantize`,
//! checked against gguf-py) rounded to f16, to nearest (or toward zero, where the adapter's
//! conversion does: lavapipe's may), and bit for bit what the f32 path stages on the same
//! adapter (`vec4<f16>(dequant8(…))`, written by the same shader), and the same again from the
//! words the tiles hold as loaded (`RAW_W`: `raw8`, decoded by `levels_raw`). Blocks cover every quant
//! value and scales whose products are ordinary, below f16's normals, past its range, zero
//! and negative.
//!
//! Run on lavapipe:
//! `VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json WGPU_BACKEND=vulkan
//!  cargo test --release --test kernels_dequant_f16 -- --nocapture`

mod common;

use coco::gguf::GgmlType;
use coco::gpu::{preprocess, GpuTensor};
use coco::reference::quant;
use common::ctx;
use half::f16;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use wgpu::util::DeviceExt;

const K: usize = 256;
const ROWS: usize = 12;

/// The f16 scales of the blocks, in turn: ordinary ones, one whose products fall below f16's
/// normals (2^-20, itself below them), one whose largest products pass 65,504, zero, negative.
const SCALES: [f32; 8] = [0.0123, 0.37, 1.5, 9.5367e-7, 9000.0, 0.0, -0.0456, 6.1e-5];

/// A block of `ty` with scale `d` and random quants (every byte value over the test's blocks).
fn block(ty: GgmlType, d: f32, rng: &mut ChaCha8Rng) -> Vec<u8> {
    let mut b = f16::from_f32(d).to_le_bytes().to_vec();
    let quant_bytes = match ty {
        GgmlType::Q4_0 => 16,
        GgmlType::Q5_0 => 4 + 16, // qh, then the nibbles
        GgmlType::Q8_0 => 32,
        _ => unreachable!("no f16 decode for {ty:?}"),
    };
    b.extend((0..quant_bytes).map(|_| rng.gen::<u8>()));
    b
}

/// `v` rounded to f16 toward zero (what lavapipe's conversion may do).
fn toward_zero(v: f32) -> f16 {
    let r = f16::from_f32(v);
    if r.is_infinite() && v.is_finite() {
        return f16::from_f32(65504.0f32.copysign(v));
    }
    if r.to_f32().abs() > v.abs() {
        f16::from_bits(r.to_bits() - 1)
    } else {
        r
    }
}

/// The GPU's half8, f16(dequant8), and half8 of the words held as loaded (`RAW_W`: raw8, then
/// levels_raw) of every 8-element group of the weight, as f16 bits.
fn decode_on_gpu(ty: GgmlType, bytes: &[u8]) -> (Vec<u16>, Vec<u16>, Vec<u16>) {
    let ctx = ctx();
    let wt = GpuTensor::from_bytes(ctx, "w", ty, K as u64, ROWS as u64, bytes, u64::MAX);
    assert_eq!(wt.parts.len(), 1);
    let define = format!("{ty:?}");
    let body = preprocess(
        "common/dequant.wgsl",
        &[define.as_str(), "LEVELS8", "HALF_W", "RAW_W"],
    );
    let source = format!(
        "enable f16;\n{body}\n\
         @group(0) @binding(0) var<storage, read> w: array<vec4<u32>>;\n\
         @group(0) @binding(1) var<storage, read_write> half_out: array<vec4<f32>>;\n\
         @group(0) @binding(2) var<storage, read_write> f32_out: array<vec4<f32>>;\n\
         @group(0) @binding(3) var<storage, read_write> raw_out: array<vec4<f32>>;\n\
         @compute @workgroup_size(64)\n\
         fn main(@builtin(global_invocation_id) id: vec3<u32>) {{\n\
             let groups = {K}u / 8u;\n\
             if (id.x >= {ROWS}u * groups) {{ return; }}\n\
             let r = w_row(id.x / groups, {K}u, {ROWS}u);\n\
             let o = id.x % groups;\n\
             let h = half8(levels8(r, o));\n\
             half_out[2u * id.x] = vec4<f32>(h[0]);\n\
             half_out[2u * id.x + 1u] = vec4<f32>(h[1]);\n\
             let v = dequant8(r, o);\n\
             f32_out[2u * id.x] = vec4<f32>(vec4<f16>(v[0]));\n\
             f32_out[2u * id.x + 1u] = vec4<f32>(vec4<f16>(v[1]));\n\
             let held = half8(levels_raw(raw8(r, o)));\n\
             raw_out[2u * id.x] = vec4<f32>(held[0]);\n\
             raw_out[2u * id.x + 1u] = vec4<f32>(held[1]);\n\
         }}\n"
    );
    let device = &ctx.device;
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("half8 check"),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    });
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("half8 check"),
        layout: None,
        module: &module,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let n = ROWS * K;
    let out = |label| {
        device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents: &vec![0u8; 4 * n],
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        })
    };
    let (half_out, f32_out, raw_out) = (out("half8"), out("dequant8"), out("raw8"));
    let bind = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("half8 check"),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[
            wgpu::BindGroupEntry {
                binding: 0,
                resource: wt.parts[0].buffer.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 1,
                resource: half_out.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 2,
                resource: f32_out.as_entire_binding(),
            },
            wgpu::BindGroupEntry {
                binding: 3,
                resource: raw_out.as_entire_binding(),
            },
        ],
    });
    let mut encoder = device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_compute_pass(&Default::default());
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.dispatch_workgroups((n / 8).div_ceil(64) as u32, 1, 1);
    }
    ctx.queue.submit([encoder.finish()]);
    if let Some(e) = pollster::block_on(scope.pop()) {
        panic!("{ty:?}: the check shader: {e}");
    }
    // f16 → f32 is exact, so the f32 read back names the f16 bits.
    let read = |b: &wgpu::Buffer| -> Vec<u16> {
        let values = ctx.read_f32(b, 0, n as u64).expect("readback");
        values.iter().map(|&v| f16::from_f32(v).to_bits()).collect()
    };
    (read(&half_out), read(&f32_out), read(&raw_out))
}

#[test]
fn f16_decode_is_the_reference_rounded_to_f16() {
    let ctx = ctx();
    if !ctx.has_f16() {
        println!("no shader-f16 on this adapter: the f16 decode is not run");
        return;
    }
    for (seed, ty) in [
        (1u64, GgmlType::Q4_0),
        (2, GgmlType::Q5_0),
        (3, GgmlType::Q8_0),
    ] {
        assert!(coco::kernels::matmul::has_half8(ty));
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let blocks = ROWS * K / 32;
        let bytes: Vec<u8> = (0..blocks)
            .flat_map(|i| block(ty, SCALES[i % SCALES.len()], &mut rng))
            .collect();
        let want = quant::dequantize(ty, &bytes, ROWS * K).expect("dequantize");
        let (half8, converted, held) = decode_on_gpu(ty, &bytes);
        assert_eq!(
            half8, held,
            "{ty:?}: the words held as loaded decode otherwise"
        );
        let (mut nearest, mut truncated) = (0, 0);
        for (i, (&got, &v)) in half8.iter().zip(&want).enumerate() {
            let rte = f16::from_f32(v);
            if got == rte.to_bits() {
                nearest += 1;
            } else if got == toward_zero(v).to_bits() {
                truncated += 1;
            } else {
                panic!(
                    "{ty:?} element {i} (block {}, d {}): half8 gave {} ({:#06x}), the \
                     reference {v} rounds to {rte}",
                    i / 32,
                    SCALES[(i / 32) % SCALES.len()],
                    f16::from_bits(got),
                    got
                );
            }
            // Bit for bit, but for the sign of zero: with a zero scale (q − c)·0 is −0 for
            // q < c, as the reference has it, where the f32 path's fma(q, d, −c·d) gives +0
            // (seen on the H100 in session 44; lavapipe matched the sign). Either zero adds
            // nothing to a sum.
            assert!(
                got == converted[i] || (got | converted[i]) & 0x7fff == 0,
                "{ty:?} element {i}: half8 ({got:#06x}) and the f32 path's conversion ({:#06x}) \
                 differ",
                converted[i]
            );
        }
        println!(
            "{ty:?}: {} elements, {nearest} the nearest f16, {truncated} rounded toward zero \
             (where the two differ), all as the f32 path stages them",
            half8.len()
        );
        assert!(
            want.iter().any(|v| v.abs() > 65504.0)
                && want.iter().any(|&v| v != 0.0 && v.abs() < 6.1e-5),
            "{ty:?}: the blocks should reach past f16's range and below its normals"
        );
    }
}
