//! `shaders/ffn_megakernel.wgsl`: the whole gated FFN of a block — RMSNorm, gate and up
//! matvecs, activation, down matvec, residual add (and gemma3's post-norm) — in ONE dispatch
//! with ONE workgroup per token row.
//!
//! This is the project's founding negative result, kept to be measured (DESIGN.md "The
//! pipeline"): with one workgroup per token, a decode step leaves all but one of the GPU's
//! compute units idle, and it was ~20× slower than the fused pipeline. It is off by default;
//! `engine::Session::set_megakernel` checks it against the normal FFN before turning it on,
//! and `coco bench` reports its A/B ratio (BENCHMARKS.md "The FFN megakernel").
//!
//! What it accepts ([`can_use_megakernel`]): W_gate and W_up of one type and shape (one
//! dequantizer serves both); W_down of any supported type (its dequantizer is appended with
//! renamed functions, see [`MegakernelKey::source`]); every weight in ONE buffer — a weight
//! split into row parts (bigger than the binding limit) is refused, since the megakernel
//! would need a binding per part of each weight and most devices allow 8 storage bindings.

use crate::gguf::GgmlType;
use crate::gpu::{preprocess_with, Binding, GpuContext, GpuTensor, StepRecorder, Work};

use super::elementwise::Activation;
use super::matmul::{check_binding, check_weight, weight_define};
use super::KernelError;

const KERNEL: &str = "ffn_megakernel";

/// Invocations per workgroup (`WG` in the shader).
pub const MEGAKERNEL_WG: u32 = 256;

/// One compiled variant of `ffn_megakernel.wgsl`.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct MegakernelKey {
    /// Type of W_gate and W_up: the shader's main dequantizer.
    pub gate_up: GgmlType,
    /// Type of W_down: the same dequantizer, or a second one appended by the host.
    pub down: GgmlType,
    pub act: Activation,
    /// gemma3: the down output is RMS-normed (post_ffw_norm) before the residual add;
    /// adds bindings `post_w[dim]` and `proj[T, dim]`.
    pub post_norm: bool,
}

impl MegakernelKey {
    /// `ffn_megakernel_q5_0_q6_k_gelu_tanh_post_norm_wg256`, `ffn_megakernel_q8_0_q8_0_silu_wg256`.
    pub fn label(&self) -> String {
        let act = match self.act {
            Activation::Silu => "silu",
            Activation::GeluTanh => "gelu_tanh",
        };
        let post = if self.post_norm { "_post_norm" } else { "" };
        format!(
            "ffn_megakernel_{}_{}_{act}{post}_wg{MEGAKERNEL_WG}",
            self.gate_up.name().to_lowercase(),
            self.down.name().to_lowercase()
        )
    }

    /// The defines selecting this variant (errors on an unsupported type).
    pub fn defines(&self) -> Result<Vec<&'static str>, KernelError> {
        weight_define(self.down)?;
        let mut d = vec![
            weight_define(self.gate_up)?,
            "MULTI_W", // the shader defines wl() over three weights
            match self.act {
                Activation::Silu => "SILU",
                Activation::GeluTanh => "GELU_TANH",
            },
        ];
        if self.down == self.gate_up {
            d.push("DOWN_SAME_TYPE");
        }
        if self.post_norm {
            d.push("POST_NORM");
        }
        Ok(d)
    }

    /// Storage bindings: w_gate, w_up, w_down, x, norm_w, hid [+ post_w, proj].
    pub fn storage_bindings(&self) -> u32 {
        if self.post_norm {
            8
        } else {
            6
        }
    }

    /// The preprocessed WGSL. With a W_down type other than W_gate's, that type's
    /// dequantizer file (`common/dequant_<type>.wgsl`) is expanded after the shader, sharing
    /// its include list (so the K-quant scale helpers appear once), and the names every
    /// dequantizer file defines (`PER_TYPE_NAMES`) get a `_down` suffix there; its other
    /// helpers are named after their type, and the word loaders it calls are
    /// type-independent and come from common/dequant.wgsl.
    pub fn source(&self) -> Result<String, KernelError> {
        let defines = self.defines()?;
        let mut included = Vec::new();
        let mut src = preprocess_with("ffn_megakernel.wgsl", &defines, &mut included);
        if self.down != self.gate_up {
            let file = format!(
                "common/dequant_{}.wgsl",
                weight_define(self.down)?.to_lowercase()
            );
            let mut down = preprocess_with(&file, &[], &mut included);
            assert_eq!(
                definitions(&down, "fn dequant8("),
                1,
                "{file}: `dequant8` once"
            );
            for name in PER_TYPE_NAMES {
                down = rename_word(&down, name, &format!("{name}_down"));
            }
            src += &down;
        }
        Ok(src)
    }
}

/// The names each `common/dequant_<type>.wgsl` defines for its type.
const PER_TYPE_NAMES: [&str; 4] = ["dequant8", "raw32", "decode8", "Raw32"];

/// `src` with every whole-word `name` replaced by `to`.
fn rename_word(src: &str, name: &str, to: &str) -> String {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(i) = rest.find(name) {
        let before = rest[..i].chars().next_back();
        let after = rest[i + name.len()..].chars().next();
        out += &rest[..i];
        if before.is_some_and(ident) || after.is_some_and(ident) {
            out += name;
        } else {
            out += to;
        }
        rest = &rest[i + name.len()..];
    }
    out + rest
}

/// Lines of `src` that define a function starting with `prefix` (`"fn dequant8("`); comments
/// that mention it don't count.
fn definitions(src: &str, prefix: &str) -> usize {
    src.lines().filter(|l| l.starts_with(prefix)).count()
}

/// Must match `Params` in ffn_megakernel.wgsl.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    dim: u32,
    ffn: u32,
    t: u32,
    eps: f32,
    _pad: [u32; 4],
}

/// Whether the megakernel can run this FFN on this device; `Err` says why not, with the
/// numbers. Checked for every layer before the switch is turned on.
pub fn can_use_megakernel(
    ctx: &GpuContext,
    w_gate: &GpuTensor, // [ffn, dim]
    w_up: &GpuTensor,   // [ffn, dim]
    w_down: &GpuTensor, // [dim, ffn]
    post_norm: bool,
) -> Result<(), String> {
    let max_binding = ctx.max_binding_bytes();
    for w in [w_gate, w_up, w_down] {
        check_weight(KERNEL, w, max_binding).map_err(|e| e.to_string())?;
        if w.parts.len() > 1 {
            return Err(format!(
                "{} is split into {} buffers (it exceeds the {} MiB binding limit); the megakernel binds each weight as one buffer",
                w.name,
                w.parts.len(),
                max_binding >> 20
            ));
        }
    }
    if w_gate.ty != w_up.ty || w_gate.row_len != w_up.row_len || w_gate.n_rows != w_up.n_rows {
        return Err(format!(
            "{} ({}, [{}, {}]) and {} ({}, [{}, {}]) differ in type or shape; the megakernel reads both with one dequantizer",
            w_gate.name, w_gate.ty, w_gate.n_rows, w_gate.row_len,
            w_up.name, w_up.ty, w_up.n_rows, w_up.row_len
        ));
    }
    if w_down.row_len != w_gate.n_rows || w_down.n_rows != w_gate.row_len {
        return Err(format!(
            "{} is [{}, {}], expected [{}, {}] to map the FFN back to the model dim",
            w_down.name, w_down.n_rows, w_down.row_len, w_gate.row_len, w_gate.n_rows
        ));
    }
    let key = MegakernelKey {
        gate_up: w_gate.ty,
        down: w_down.ty,
        act: Activation::Silu,
        post_norm,
    };
    let limit = ctx.limits.max_storage_buffers_per_shader_stage;
    if key.storage_bindings() > limit {
        return Err(format!(
            "{} storage bindings exceed this device's per-stage limit of {limit}",
            key.storage_bindings()
        ));
    }
    if MEGAKERNEL_WG > ctx.limits.max_compute_invocations_per_workgroup {
        return Err(format!(
            "{MEGAKERNEL_WG} invocations per workgroup exceed this device's limit of {}",
            ctx.limits.max_compute_invocations_per_workgroup
        ));
    }
    Ok(())
}

/// gemma3's post-FFN norm, applied to the down output before the residual add.
#[derive(Clone, Copy, Debug)]
pub struct PostNorm<'a> {
    /// post_ffw_norm `[dim]` f32.
    pub w: &'a Binding,
    /// Scratch for the down output `[T, dim]` f32 (the session's `proj`).
    pub scratch: &'a Binding,
}

/// Records the whole FFN for `t` token rows in one dispatch of `t` workgroups:
/// `x += [post_norm](act(x'·W_gateᵀ) ⊙ x'·W_upᵀ)·W_downᵀ` with `x' = RMSNorm(x)·norm_w`.
#[allow(clippy::too_many_arguments)]
pub fn ffn_megakernel(
    rec: &mut StepRecorder,
    w_gate: &GpuTensor,    // [ffn, dim] (gpu::layout)
    w_up: &GpuTensor,      // [ffn, dim] (gpu::layout)
    w_down: &GpuTensor,    // [dim, ffn] (gpu::layout)
    norm: (&Binding, f32), // (ffn_norm [dim] f32, eps; also the post-norm's eps)
    post_norm: Option<PostNorm>,
    x: &Binding,      // [T, dim] f32 residual stream, read and written
    hidden: &Binding, // [T, ffn] f32 scratch
    t: u32,
    act: Activation,
) -> Result<(), KernelError> {
    let ctx = rec.ctx();
    can_use_megakernel(ctx, w_gate, w_up, w_down, post_norm.is_some()).map_err(|why| {
        KernelError::Shape {
            kernel: KERNEL,
            why,
        }
    })?;
    let (dim, ffn) = (w_gate.row_len, w_gate.n_rows);
    let (norm_w, eps) = norm;
    if !eps.is_finite() || eps < 0.0 {
        return Err(KernelError::Shape {
            kernel: KERNEL,
            why: format!("eps {eps} is not a finite value >= 0"),
        });
    }
    if t == 0 {
        return Ok(());
    }
    check_binding(KERNEL, "x [T, dim]", x, t as u64 * dim)?;
    check_binding(KERNEL, "norm_w [dim]", norm_w, dim)?;
    check_binding(KERNEL, "hidden [T, ffn]", hidden, t as u64 * ffn)?;
    let mut writable = vec![x, hidden];
    if let Some(pn) = &post_norm {
        check_binding(KERNEL, "post_norm_w [dim]", pn.w, dim)?;
        check_binding(KERNEL, "proj [T, dim]", pn.scratch, t as u64 * dim)?;
        writable.push(pn.scratch);
    }
    // A writable binding may not alias another binding of the same dispatch.
    for (i, a) in writable.iter().enumerate() {
        if writable[i + 1..].iter().any(|b| b.buffer == a.buffer) {
            return Err(KernelError::Shape {
                kernel: KERNEL,
                why: "x, hidden and the post-norm scratch must be distinct buffers".into(),
            });
        }
    }
    let max = ctx.limits.max_compute_workgroups_per_dimension;
    if t > max {
        return Err(KernelError::Shape {
            kernel: KERNEL,
            why: format!("{t} token rows exceed the {max} workgroups per dimension"),
        });
    }
    let key = MegakernelKey {
        gate_up: w_gate.ty,
        down: w_down.ty,
        act,
        post_norm: post_norm.is_some(),
    };
    key.defines()?;
    let label = key.label();
    let pipeline = ctx.pipeline(&label, || key.source().expect("defines checked above"));
    let params = Params {
        dim: dim as u32,
        ffn: ffn as u32,
        t,
        eps,
        _pad: [0; 4],
    };
    let mut bindings = vec![
        Binding::from(&w_gate.parts[0].buffer),
        Binding::from(&w_up.parts[0].buffer),
        Binding::from(&w_down.parts[0].buffer),
        x.clone(),
        norm_w.clone(),
        hidden.clone(),
    ];
    if let Some(pn) = post_norm {
        bindings.extend([pn.w.clone(), pn.scratch.clone()]);
    }
    debug_assert_eq!(bindings.len() as u32, key.storage_bindings());
    // The three products' weights once, x read and written, the hidden rows written and read
    // back; two operations per weight and token.
    let t64 = t as u64;
    let work = Work {
        bytes: w_gate.total_bytes()
            + w_up.total_bytes()
            + w_down.total_bytes()
            + 4 * t64 * (2 * dim + 2 * ffn),
        flops: 2 * t64 * 3 * dim * ffn,
    };
    rec.dispatch_counted(
        &pipeline,
        bytemuck::bytes_of(&params),
        &bindings,
        [t, 1, 1],
        Some(work),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_name_the_variant() {
        let key = MegakernelKey {
            gate_up: GgmlType::Q5_0,
            down: GgmlType::Q6_K,
            act: Activation::GeluTanh,
            post_norm: true,
        };
        assert_eq!(
            key.label(),
            "ffn_megakernel_q5_0_q6_k_gelu_tanh_post_norm_wg256"
        );
    }

    /// Every pair of types preprocesses to one `dequant8` and one `dequant8_down`, and the
    /// K-quant scale helpers appear once even when both types need them.
    #[test]
    fn every_type_pair_preprocesses() {
        for gate_up in GgmlType::SUPPORTED {
            for down in GgmlType::SUPPORTED {
                let key = MegakernelKey {
                    gate_up,
                    down,
                    act: Activation::Silu,
                    post_norm: down == GgmlType::Q6_K,
                };
                let src = key.source().unwrap();
                let label = key.label();
                assert_eq!(definitions(&src, "fn dequant8("), 1, "{label}");
                assert_eq!(definitions(&src, "fn dequant8_down("), 1, "{label}");
                assert!(definitions(&src, "fn scale_min_k4(") <= 1, "{label}");
                assert!(src.contains("fn main"), "{label}");
            }
        }
    }
}
