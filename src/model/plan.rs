//! The fusion plan of a session: which fused form each step of the forward takes on this
//! device, decided once from the config, the loaded weights (their types and buffer splits)
//! and the adapter (subgroups, cooperative matrices, storage-binding limits, `COCO_MATVEC`,
//! `COCO_COOPMAT`), the session's pipeline (`--unfused`) and its megakernel switch.
//!
//! Every structural choice the forward makes is made here, with its reason: norm folded or
//! not, Q/K/V in one dispatch or three, RoPE and the KV write in the matvec, the per-head Q/K
//! norms (gemma3, qwen3) folded into the RoPE kernel, gate/up + activation in one dispatch,
//! the FFN megakernel, the LM head's norm (and gemma2's final logit soft-cap in its store),
//! and which layers skip RoPE (SmolLM3's NoPE layers write K/V to the cache as they come out
//! of the products). Two choices depend on the step itself, so the plan holds
//! their rule and the forward asks it per step: whether a step is a matvec step (its token
//! count; [`matvec_max_t`]) and whether attention splits its keys (the step's rows and
//! context; [`attention::plan`]). [`Plan::layer_ops`] is the list a layer's forward runs,
//! [`Plan::labels`] the pipeline labels a step records (what `tests/profile.rs` holds the
//! recorder to), and `Display` prints one line per step with its reason (`coco info -v`, the
//! page's model details).

mod text;

use text::rope_name;
pub use text::PlanLine;

use crate::gpu::{AttentionMerge, GpuContext, GpuTensor};
use crate::kernels::attention::{
    self, AttentionPlan, AttentionShape, COOP_MIN_T, DECODE_SPLIT_SEARCH, SPLIT_MAX_ROWS,
};
use crate::kernels::elementwise::Activation;
use crate::kernels::get_rows::GetRowsKey;
use crate::kernels::matmul::{
    can_fuse_glu, chunk_min_k, chunk_short_k_min, chunk_splits_override, coop128_min_groups,
    coop64_max_t, coop_prestage, coop_stream, coop_subgroup_tile64, coop_vec_stage, ffn_levels_fit,
    matvec_max_t, matvec_shape, o_levels_fit, planned_labels, post_norm_fuses, post_norm_max_t,
    qkv_fuses, tile_split_target_override, DeviceKernels, Fusion, GemmChoice, MatmulVariant,
    StageX, WideTile, XLevels, AUTO_SPLIT, CHUNK_WIDE, COOP64_MAX_WEIGHTS, COOP_STREAM_MAX_T,
    TILE_SPLIT_MIN_CHUNKS, TILE_SPLIT_TARGET, WIDE_MIN_GROUPS,
};
use crate::kernels::megakernel::MegakernelKey;
use crate::kernels::qkv_rope::{qk_norm_max_t, qkv_rope_fits, v_rows_bindable};
use crate::kernels::rope::{RopeLayout, QK_NORM_MAX_HEAD_DIM};

use super::weights::LayerWeights;
use super::{activation, rope_layout, Arch, LogitsFor, Model, Pipeline};

/// Which RMSNorm a [`Op::Norm`] or [`Op::PostNorm`] applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NormOf {
    Attention,
    Ffn,
    Output,
}

/// One step of the forward as it is recorded: a kernel call of one or more dispatches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Token embeddings (`get_rows`, a dispatch per part of the table).
    Embed,
    /// RMSNorm of the residual stream into `xn`, for the products that read it.
    Norm(NormOf),
    /// Attention norm + Q/K/V (+ biases) + RoPE + the KV-cache write: one matvec;
    /// `v_apart`: V left to [`Op::VIntoCache`].
    QkvRopeKv { v_apart: bool },
    /// Attention norm + V (+ bias) written straight into the V-cache rows: one product, for
    /// a W_v of another type than W_q's and W_k's.
    VIntoCache,
    /// Q/K/V (+ biases) in one dispatch; `norm`: the attention norm folded in.
    Qkv { norm: bool },
    /// Q, K and V as three products (each with the norm folded in when `norm`).
    QkvEach { norm: bool },
    /// The per-head Q and K RMSNorms (gemma3, qwen3), in place: two dispatches.
    QkNorm,
    /// RoPE on q and k and the KV-cache write in one dispatch; `qk_norm`: the per-head
    /// norms folded in.
    RopeKvWrite { qk_norm: bool },
    /// RoPE on q, then on k: two dispatches.
    Rope,
    /// k and v into the cache.
    KvWrite,
    /// Causal attention on this path: one pass, or split key ranges and their combine.
    Attention(AttentionPlan),
    /// W_o; `residual`: added into the residual stream, else written to `proj`; `levels`: x'
    /// read as the levels the attention merge wrote ([`Plan::o_levels`]).
    OProj { residual: bool, levels: bool },
    /// W_o with gemma's post-norm folded in: the normed product added into the residual
    /// stream by the product's last workgroup (`matmul_post_norm_add`), one dispatch.
    OProjPostNorm,
    /// gemma3's post-norm of `proj`, added into the residual stream.
    PostNorm(NormOf),
    /// FFN norm + gate/up + activation in one dispatch; `levels`: it also writes its output
    /// as the int8 levels W_down reads ([`Op::Down`]'s `levels`).
    GateUpGlu { levels: bool },
    /// Gate and up as two products of `xn`.
    GateUp,
    /// The activation times up, elementwise.
    Glu,
    /// W_down; `residual` as for [`Op::OProj`]; `levels`: x' read as the levels the GLU
    /// wrote, not staged from `act` by each workgroup.
    Down { residual: bool, levels: bool },
    /// W_down with its post-norm folded in, as [`Op::OProjPostNorm`].
    DownPostNorm,
    /// The whole FFN half (norm, gate/up, activation, down, residual, post-norm): one
    /// workgroup per token, the megakernel kept to measure that it loses.
    Megakernel,
    /// The vocabulary product; `norm`: the final RMSNorm folded in. gemma2's final
    /// soft-cap ([`Plan::final_softcap`]) is applied as it stores the logits.
    LmHead { norm: bool },
}

/// A choice and the reason it went that way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    pub on: bool,
    pub why: String,
}

impl Choice {
    fn yes(why: impl Into<String>) -> Choice {
        Choice {
            on: true,
            why: why.into(),
        }
    }
    fn no(why: impl Into<String>) -> Choice {
        Choice {
            on: false,
            why: why.into(),
        }
    }
}

/// How a layer's FFN half runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FfnPlan {
    /// [`Op::Megakernel`].
    Megakernel,
    /// [`Op::GateUpGlu`] then [`Op::Down`]; the reason gate and up pair.
    Glu(String),
    /// Norm, gate, up, glu, down; why not fused.
    Separate(String),
}

/// The decisions for one layer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerPlan {
    /// [`Op::QkvRopeKv`] on matvec steps.
    pub qkv_rope: Choice,
    /// With `qkv_rope`: W_v's type differs from W_q's and W_k's, so V is its own product
    /// into the cache ([`Op::VIntoCache`]).
    pub v_apart: bool,
    /// [`Op::Qkv`] rather than [`Op::QkvEach`] (fused pipeline, steps without `qkv_rope`).
    pub qkv_one: Choice,
    /// gemma3, qwen3: their Q/K norms folded into [`Op::RopeKvWrite`]; `None` without Q/K norms.
    pub qk_norm: Option<Choice>,
    pub ffn: FfnPlan,
    /// Q/K/V biases (qwen2), bound into the products.
    pub biases: bool,
    /// gemma3's sandwich norms: W_o and W_down write `proj`, a post-norm adds it in.
    pub post_norms: bool,
    /// The post-norms folded into W_o and W_down on matvec steps ([`Op::OProjPostNorm`],
    /// [`Op::DownPostNorm`]); `None` without post-norms.
    pub post_norm_fold: Option<Choice>,
    /// The step sizes whose GLU writes W_down's x' as int8 levels (bit t − 1 for a step of
    /// t ≤ 64 tokens; [`ffn_levels_fit`]); 0 where the FFN is not [`FfnPlan::Glu`], or with
    /// post-norms.
    pub ffn_levels_steps: u64,
    /// The step sizes whose W_o may read its x' as int8 levels from the attention merge (bit
    /// t − 1 for t ≤ 64 tokens; [`o_levels_fit`]), where the merge runs ([`Plan::o_levels`]);
    /// 0 with post-norms, without subgroups, or with heads of partial chunks.
    pub o_levels_steps: u64,
    /// Sliding-window size (0: full causal attention).
    pub window: u32,
    /// RoPE on q and k; `false` on SmolLM3's NoPE layers, whose Q/K/V products are followed
    /// by the KV-cache write alone ([`Op::KvWrite`]).
    pub rope: bool,
}

/// The plan of one session; see the module docs.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub arch: Arch,
    pub pipeline: Pipeline,
    /// The megakernel switch as asked, and whether every layer could take it.
    pub megakernel: Option<Choice>,
    /// The matvec and tile kernels the products run with.
    pub kernels: DeviceKernels,
    /// Steps of at most this many tokens run the matvec (`None`: every step).
    pub matvec_max_t: Option<u32>,
    /// Who merges flash-decoding's key ranges (the device's option).
    pub attention_merge: AttentionMerge,
    /// The single-pass attention's 2 × 2 score blocks (the device's option).
    pub attention_blocked: bool,
    /// The tensor-core single pass's tile for steps of `kernels::attention::COOP_MIN_T`+
    /// tokens (`kernels::attention::coop_tile`), where the device runs it.
    pub attention_coop_tile: Option<(u32, u32)>,
    pub layers: Vec<LayerPlan>,
    /// The final norm folded into the LM head.
    pub lm_head_norm: bool,
    /// gemma2's final logit soft-cap, folded into the LM head's store.
    pub final_softcap: Option<f32>,
    /// Steps of at most this many tokens may fold the post-norms (their scratch's bound).
    post_norm_max_t: u32,
    heads: u32,
    kv_heads: u32,
    head_dim: u32,
    attn_scale: f32,
    attn_softcap: f32,
    rope: RopeLayout,
    act: Activation,
    /// What the device description and weights looked like, for the printed lines.
    facts: Facts,
}

#[derive(Clone, Debug, PartialEq)]
struct Facts {
    device: String,
    embed: String,
    lm_head: String,
}

/// The step sizes t in 1..=64 for which `fits(t)`, as bits t − 1.
fn steps_where(fits: impl Fn(u32) -> bool) -> u64 {
    (1..=64u32)
        .filter(|&t| fits(t))
        .fold(0, |bits, t| bits | 1 << (t - 1))
}

/// Whether `steps` (bits t − 1, [`steps_where`]) holds a step of `t` tokens.
fn step_in(steps: u64, t: u32) -> bool {
    (1..=64).contains(&t) && steps >> (t - 1) & 1 == 1
}

fn types(ws: &[&GpuTensor]) -> String {
    ws.iter().map(|w| w.ty.name()).collect::<Vec<_>>().join("/")
}

/// "; attn_q, attn_k widened from the file's Q5_0 at load …" for the widened ones of `ws`.
fn widened(ws: &[&GpuTensor]) -> String {
    let widened: Vec<&&GpuTensor> = ws.iter().filter(|w| w.is_widened()).collect();
    let Some(first) = widened.first() else {
        return String::new();
    };
    let extra: u64 = widened
        .iter()
        .map(|w| w.total_bytes() - w.file_bytes())
        .sum();
    format!(
        "; {} widened from the file's {} at load: the same values, +{:.2} MiB",
        widened
            .iter()
            .map(|w| short_name(&w.name))
            .collect::<Vec<_>>()
            .join(", "),
        first.file_ty.name(),
        extra as f64 / (1 << 20) as f64
    )
}

/// "attn_q" of "blk.3.attn_q.weight".
fn short_name(name: &str) -> &str {
    let name = name.strip_suffix(".weight").unwrap_or(name);
    name.rsplit('.').next().unwrap_or(name)
}

fn parts(w: &GpuTensor) -> String {
    match w.parts.len() {
        1 => format!("{}, one buffer", w.ty.name()),
        n => format!("{}, {n} buffers: over the binding limit", w.ty.name()),
    }
}

impl Plan {
    /// The plan for `model` on `ctx` with the session's pipeline and megakernel switch.
    pub fn new(model: &Model, ctx: &GpuContext, pipeline: Pipeline, megakernel: bool) -> Plan {
        let c = &model.config;
        let w = &model.weights;
        let kernels = DeviceKernels::of(ctx);
        let fused = pipeline == Pipeline::Fused;
        let limit = ctx.limits.max_storage_buffers_per_shader_stage;
        let rope = rope_layout(c);
        let mega = megakernel.then(|| match super::megakernel_support(model, ctx) {
            Ok(()) => Choice::yes(
                "every layer's gate, up and down bind as one buffer each, gate and up of one type",
            ),
            Err(why) => Choice::no(why),
        });
        let mega_on = mega.as_ref().is_some_and(|m| m.on);
        let layers = w
            .layers
            .iter()
            .enumerate()
            .map(|(l, lw)| {
                let qkv = [&lw.wq, &lw.wk, &lw.wv];
                let biases = lw.bq.is_some() && lw.bk.is_some() && lw.bv.is_some();
                let one_type = lw.wq.ty == lw.wk.ty && lw.wq.ty == lw.wv.ty;
                let one_part = qkv.iter().all(|w| w.parts.len() == 1);
                let why_not = || {
                    if !one_type {
                        format!("Q/K/V types differ: {}", types(&qkv))
                    } else if !one_part {
                        "a Q/K/V weight is split into buffers".to_string()
                    } else {
                        format!("its storage bindings exceed this device's {limit} per stage")
                    }
                };
                let has_qk_norm = lw.q_norm.is_some() && lw.k_norm.is_some();
                let uses_rope = c.uses_rope(l as u32);
                // W_v of its own type (llama.cpp's Q4_K_M keeps some layers' at Q8_0 or
                // Q6_K): Q/K take the fused matvec and V writes its cache rows itself.
                let v_apart = lw.wq.ty == lw.wk.ty
                    && lw.wv.ty != lw.wq.ty
                    && v_rows_bindable(ctx, lw.wv.n_rows);
                let qkv_rope = if !fused {
                    Choice::no("unfused pipeline")
                } else if !uses_rope {
                    Choice::no("a layer without RoPE (NoPE)")
                } else if has_qk_norm && c.head_dim > QK_NORM_MAX_HEAD_DIM {
                    Choice::no(format!(
                        "the per-head Q/K norm of head_dim {} > {QK_NORM_MAX_HEAD_DIM}, a \
                         workgroup's pairs",
                        c.head_dim
                    ))
                } else if qkv_rope_fits(
                    ctx,
                    &lw.wq,
                    &lw.wk,
                    (!v_apart).then_some(&lw.wv),
                    true,
                    biases,
                    has_qk_norm,
                    rope,
                ) {
                    let (fused, v) = if v_apart {
                        (&qkv[..2], format!("; V ({}) apart", lw.wv.ty.name()))
                    } else {
                        (&qkv[..], String::new())
                    };
                    Choice::yes(format!(
                        "{} {} in one buffer each{}{v}, head_dim {} rope {}{}",
                        if v_apart { "Q/K" } else { "Q/K/V" },
                        types(fused),
                        widened(fused),
                        c.head_dim,
                        rope_name(rope),
                        if has_qk_norm {
                            ", the per-head Q/K norm by each head's last workgroup"
                        } else {
                            ""
                        }
                    ))
                } else {
                    Choice::no(why_not())
                };
                let qkv_one = if !fused {
                    Choice::no("unfused pipeline")
                } else if qkv_fuses(ctx, &lw.wq, &lw.wk, &lw.wv, true, biases) {
                    Choice::yes(format!(
                        "Q/K/V {} in one buffer each{}",
                        types(&qkv),
                        widened(&qkv)
                    ))
                } else {
                    Choice::no(why_not())
                };
                let qk_norm = has_qk_norm.then(|| {
                    if !fused {
                        Choice::no("unfused pipeline")
                    } else if !uses_rope {
                        Choice::no("no RoPE kernel on this layer to fold them into")
                    } else if c.head_dim <= QK_NORM_MAX_HEAD_DIM {
                        Choice::yes(format!("head_dim {} <= {QK_NORM_MAX_HEAD_DIM}", c.head_dim))
                    } else {
                        Choice::no(format!(
                            "head_dim {} > {QK_NORM_MAX_HEAD_DIM}, a workgroup's pairs",
                            c.head_dim
                        ))
                    }
                });
                let ffn = if mega_on {
                    FfnPlan::Megakernel
                } else if !fused {
                    FfnPlan::Separate("unfused pipeline".into())
                } else if can_fuse_glu(&lw.w_gate, &lw.w_up) {
                    FfnPlan::Glu(format!(
                        "gate and up {} split alike",
                        types(&[&lw.w_gate, &lw.w_up])
                    ))
                } else {
                    FfnPlan::Separate(format!(
                        "gate and up differ in type or split: {}",
                        types(&[&lw.w_gate, &lw.w_up])
                    ))
                };
                // the post-norm epilogue needs the whole row in one dispatch and a matvec
                // whose last workgroup reduces with subgroup sums
                let post_norm_fold = c.post_norms.then(|| {
                    let fits = |w: &GpuTensor| post_norm_fuses(ctx, w, 1);
                    if !fused {
                        Choice::no("unfused pipeline")
                    } else if fits(&lw.wo) && fits(&lw.w_down) {
                        Choice::yes(format!(
                            "W_o and W_down ({}) in one buffer each, a subgroup matvec",
                            types(&[&lw.wo, &lw.w_down])
                        ))
                    } else {
                        Choice::no(format!(
                            "W_o or W_down split into buffers, or the {} matvec has no \
                             post-norm epilogue",
                            kernels.matvec.label()
                        ))
                    }
                });
                let ffn_levels_steps = if matches!(ffn, FfnPlan::Glu(_)) && !c.post_norms {
                    let (gate, up, down) = (&lw.w_gate, &lw.w_up, &lw.w_down);
                    steps_where(|t| ffn_levels_fit(ctx, gate, up, down, true, activation(c), t))
                } else {
                    0
                };
                let o_levels_steps = if fused
                    && !c.post_norms
                    && ctx.has_subgroups()
                    && c.head_dim.is_multiple_of(32)
                {
                    steps_where(|t| o_levels_fit(ctx, &lw.wo, t))
                } else {
                    0
                };
                LayerPlan {
                    v_apart: v_apart && qkv_rope.on,
                    ffn_levels_steps,
                    o_levels_steps,
                    qkv_rope,
                    qkv_one,
                    qk_norm,
                    ffn,
                    biases,
                    post_norms: c.post_norms,
                    post_norm_fold,
                    window: c.window(l as u32),
                    rope: uses_rope,
                }
            })
            .collect();
        let tied = if w.output.is_none() {
            ", tied to token_embd"
        } else {
            ""
        };
        Plan {
            arch: c.arch,
            pipeline,
            megakernel: mega,
            kernels,
            matvec_max_t: matvec_max_t(kernels),
            attention_merge: ctx.attention_merge,
            attention_blocked: ctx.attention_blocked,
            attention_coop_tile: attention::coop_tile(ctx, c.head_dim, COOP_MIN_T),
            layers,
            lm_head_norm: fused,
            final_softcap: c.final_softcap,
            post_norm_max_t: post_norm_max_t(c.dim as u64),
            heads: c.n_heads,
            kv_heads: c.n_kv_heads,
            head_dim: c.head_dim,
            attn_scale: c.attn_scale,
            attn_softcap: c.attn_softcap.unwrap_or(0.0),
            rope,
            act: activation(c),
            facts: Facts {
                device: ctx.describe(),
                embed: parts(&w.token_embd),
                lm_head: format!("{}{tied}", parts(w.lm_head())),
            },
        }
    }

    /// Whether a step of `t` tokens runs the matvec (else the tiles).
    pub fn is_matvec_step(&self, t: u32) -> bool {
        self.matvec_max_t.is_none_or(|max| t <= max)
    }

    /// The attention shape of layer `l` for a step of `t` tokens at `pos0`.
    pub fn attention_shape(&self, l: usize, t: u32, pos0: u32) -> AttentionShape {
        AttentionShape {
            t,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            pos0,
            window: self.layers[l].window,
            scale: self.attn_scale,
            softcap: self.attn_softcap,
        }
    }

    /// Layer `l`'s attention half for a step of `t` tokens at `pos0`: from the residual
    /// stream to the attention output.
    pub fn attention_ops(&self, l: usize, t: u32, pos0: u32) -> Vec<Op> {
        let lp = &self.layers[l];
        let mut ops = Vec::new();
        if self.pipeline == Pipeline::Unfused {
            ops.extend([Op::Norm(NormOf::Attention), Op::QkvEach { norm: false }]);
            if lp.qk_norm.is_some() {
                ops.push(Op::QkNorm);
            }
            if lp.rope {
                ops.push(Op::Rope);
            }
            ops.push(Op::KvWrite);
        } else if lp.qkv_rope.on && self.is_matvec_step(t) && self.qkv_rope_holds(l, t) {
            ops.push(Op::QkvRopeKv {
                v_apart: lp.v_apart,
            });
            if lp.v_apart {
                ops.push(Op::VIntoCache);
            }
        } else {
            ops.push(if lp.qkv_one.on {
                Op::Qkv { norm: true }
            } else {
                Op::QkvEach { norm: true }
            });
            let folded = lp.qk_norm.as_ref().map(|q| q.on);
            if folded == Some(false) {
                ops.push(Op::QkNorm);
            }
            ops.push(if lp.rope {
                Op::RopeKvWrite {
                    qk_norm: folded == Some(true),
                }
            } else {
                Op::KvWrite
            });
        }
        ops.push(Op::Attention(attention::plan(
            &self.attention_shape(l, t, pos0),
        )));
        ops
    }

    /// Whether the fused Q/K/V + RoPE of layer `l` holds `t` tokens: with the Q/K norm
    /// folded in, its scratch bounds the tokens ([`qk_norm_max_t`]).
    fn qkv_rope_holds(&self, l: usize, t: u32) -> bool {
        self.layers[l].qk_norm.is_none()
            || t <= qk_norm_max_t(self.heads, self.kv_heads, self.head_dim)
    }

    /// Whether layer `l`'s post-norms fold into W_o and W_down on a step of `t` tokens.
    fn post_norm_folded(&self, l: usize, t: u32) -> bool {
        let on = self.layers[l].post_norm_fold.as_ref().is_some_and(|c| c.on);
        on && self.is_matvec_step(t) && t <= self.post_norm_max_t
    }

    /// Layer `l`'s output projection for a step of `t` tokens at `pos0`: W_o into the residual
    /// stream (gemma's post-norm folded in, or as its own dispatch).
    pub fn o_proj_ops(&self, l: usize, t: u32, pos0: u32) -> Vec<Op> {
        if !self.layers[l].post_norms {
            let levels = self.o_levels(l, t, pos0);
            vec![Op::OProj {
                residual: true,
                levels,
            }]
        } else if self.post_norm_folded(l, t) {
            vec![Op::OProjPostNorm]
        } else {
            vec![
                Op::OProj {
                    residual: false,
                    levels: false,
                },
                Op::PostNorm(NormOf::Attention),
            ]
        }
    }

    /// Whether layer `l`'s attention merge writes W_o's x' as int8 levels, which W_o reads, on a
    /// step of `t` tokens at `pos0`: where W_o can ([`LayerPlan::o_levels_steps`]) and the
    /// keys are split (only the merge of split ranges writes them).
    pub fn o_levels(&self, l: usize, t: u32, pos0: u32) -> bool {
        step_in(self.layers[l].o_levels_steps, t)
            && attention::plan(&self.attention_shape(l, t, pos0)).splits > 1
    }

    /// Layer `l`'s FFN half for a step of `t` tokens: from the residual stream back into it.
    pub fn ffn_ops(&self, l: usize, t: u32) -> Vec<Op> {
        let levels = step_in(self.layers[l].ffn_levels_steps, t);
        let mut ops = match self.layers[l].ffn {
            FfnPlan::Megakernel => return vec![Op::Megakernel],
            FfnPlan::Glu(_) => vec![Op::GateUpGlu { levels }],
            FfnPlan::Separate(_) => vec![Op::Norm(NormOf::Ffn), Op::GateUp, Op::Glu],
        };
        if !self.layers[l].post_norms {
            ops.push(Op::Down {
                residual: true,
                levels,
            });
        } else if self.post_norm_folded(l, t) {
            ops.push(Op::DownPostNorm);
        } else {
            ops.extend([
                Op::Down {
                    residual: false,
                    levels: false,
                },
                Op::PostNorm(NormOf::Ffn),
            ]);
        }
        ops
    }

    /// Every op of layer `l`: the attention half, W_o (and gemma's post-norm), the FFN half.
    pub fn layer_ops(&self, l: usize, t: u32, pos0: u32) -> Vec<Op> {
        let mut ops = self.attention_ops(l, t, pos0);
        ops.extend(self.o_proj_ops(l, t, pos0));
        ops.extend(self.ffn_ops(l, t));
        ops
    }

    /// The final norm and the vocabulary product.
    pub fn head_ops(&self) -> Vec<Op> {
        if self.lm_head_norm {
            vec![Op::LmHead { norm: true }]
        } else {
            vec![Op::Norm(NormOf::Output), Op::LmHead { norm: false }]
        }
    }

    /// The whole step in order.
    pub fn step_ops(&self, t: u32, pos0: u32) -> Vec<Op> {
        let mut ops = vec![Op::Embed];
        for l in 0..self.layers.len() {
            ops.extend(self.layer_ops(l, t, pos0));
        }
        ops.extend(self.head_ops());
        ops
    }

    /// The pipeline labels a step of `t` tokens at `pos0` records, in order: what
    /// `StepRecorder::labels` must return for it (`model` and `ctx` are the plan's own).
    pub fn labels(
        &self,
        model: &Model,
        ctx: &GpuContext,
        t: u32,
        pos0: u32,
        logits_for: LogitsFor,
    ) -> Vec<String> {
        let w = &model.weights;
        let mut out = Vec::new();
        // `w` (the first weight of a fused product) over `slots` rows in all, for `rows` tokens.
        let product_levels =
            |out: &mut Vec<String>, w: &GpuTensor, slots, rows, bias, norm, fusion, levels| {
                let labels = planned_labels(
                    ctx, w.ty, rows, w.row_len, slots, bias, norm, fusion, levels,
                );
                for _ in &w.parts {
                    out.extend(labels.iter().cloned());
                }
            };
        let product = |out: &mut Vec<String>, w: &GpuTensor, slots, rows, bias, norm, fusion| {
            product_levels(out, w, slots, rows, bias, norm, fusion, XLevels::Staged)
        };
        // W_o or W_down (all rows, no bias or norm), its x' read as levels where `levels`.
        let reader = |out: &mut Vec<String>, w: &GpuTensor, levels: bool| {
            let x = if levels {
                XLevels::Read
            } else {
                XLevels::Staged
            };
            product_levels(out, w, w.n_rows, t, false, false, Fusion::None, x)
        };
        let qkv_slots = |lw: &LayerWeights| lw.wq.n_rows + lw.wk.n_rows + lw.wv.n_rows;
        let rope = rope_name(self.rope);
        let act = match self.act {
            Activation::Silu => "silu",
            Activation::GeluTanh => "gelu_tanh",
        };
        let push = |out: &mut Vec<String>, l: Option<usize>, op: Op| {
            let lw = l.map(|l| &w.layers[l]);
            let lp = l.map(|l| &self.layers[l]);
            match (op, lw, lp) {
                (Op::Embed, ..) => {
                    let label = GetRowsKey {
                        ty: w.token_embd.ty,
                    }
                    .label();
                    out.extend(std::iter::repeat_n(label, w.token_embd.parts.len()));
                }
                (Op::Norm(_), ..) => out.push("norm_rms".into()),
                (Op::QkvRopeKv { v_apart }, Some(lw), Some(lp)) => {
                    let fusion = Fusion::QkvRope {
                        layout: self.rope,
                        qk_norm: lp.qk_norm.is_some(),
                    };
                    let slots = qkv_slots(lw) - if v_apart { lw.wv.n_rows } else { 0 };
                    product(out, &lw.wq, slots, t, lp.biases, true, fusion)
                }
                (Op::VIntoCache, Some(lw), Some(lp)) => {
                    product(out, &lw.wv, lw.wv.n_rows, t, lp.biases, true, Fusion::None)
                }
                (Op::Qkv { norm }, Some(lw), Some(lp)) => {
                    product(out, &lw.wq, qkv_slots(lw), t, lp.biases, norm, Fusion::Qkv)
                }
                (Op::QkvEach { norm }, Some(lw), _) => {
                    for (w, b) in [(&lw.wq, &lw.bq), (&lw.wk, &lw.bk), (&lw.wv, &lw.bv)] {
                        product(out, w, w.n_rows, t, b.is_some(), norm, Fusion::None);
                    }
                }
                (Op::QkNorm, ..) => {
                    out.extend(["norm_rms_in_place".into(), "norm_rms_in_place".into()])
                }
                (Op::RopeKvWrite { qk_norm }, ..) => out.push(format!(
                    "rope_kv_write_{rope}{}",
                    if qk_norm { "_qk_norm" } else { "" }
                )),
                (Op::Rope, ..) => out.extend([format!("rope_{rope}"), format!("rope_{rope}")]),
                (Op::KvWrite, ..) => out.push("attention_kv_write".into()),
                (Op::Attention(a), ..) if a.splits <= 1 => {
                    out.push(attention::single_pass_label(ctx, self.head_dim, t))
                }
                (Op::Attention(_), ..) => {
                    let lv = if l.is_some_and(|l| self.o_levels(l, t, pos0)) {
                        "_lvout"
                    } else {
                        ""
                    };
                    if self.attention_merge == AttentionMerge::InSplit {
                        out.push(format!("attention_split_merge{lv}"))
                    } else {
                        out.extend(["attention_split".into(), format!("attention_combine{lv}")])
                    }
                }
                (Op::OProj { levels, .. }, Some(lw), _) => reader(out, &lw.wo, levels),
                (Op::OProjPostNorm, Some(lw), _) => {
                    product(out, &lw.wo, lw.wo.n_rows, t, false, false, Fusion::PostNorm)
                }
                (Op::DownPostNorm, Some(lw), _) => product(
                    out,
                    &lw.w_down,
                    lw.w_down.n_rows,
                    t,
                    false,
                    false,
                    Fusion::PostNorm,
                ),
                (Op::PostNorm(_), ..) => out.push("norm_rms_add".into()),
                (Op::GateUpGlu { levels }, Some(lw), _) => {
                    let glu = Fusion::Glu(self.act);
                    let levels = if levels {
                        XLevels::Emit
                    } else {
                        XLevels::Staged
                    };
                    let slots = 2 * lw.w_gate.n_rows;
                    product_levels(out, &lw.w_gate, slots, t, false, true, glu, levels)
                }
                (Op::GateUp, Some(lw), _) => {
                    for w in [&lw.w_gate, &lw.w_up] {
                        product(out, w, w.n_rows, t, false, false, Fusion::None);
                    }
                }
                (Op::Glu, ..) => out.push(format!("elementwise_glu_{act}")),
                (Op::Down { levels, .. }, Some(lw), _) => reader(out, &lw.w_down, levels),
                (Op::Megakernel, Some(lw), Some(lp)) => out.push(
                    MegakernelKey {
                        gate_up: lw.w_gate.ty,
                        down: lw.w_down.ty,
                        act: self.act,
                        post_norm: lp.post_norms,
                    }
                    .label(),
                ),
                (Op::LmHead { norm }, ..) => {
                    let rows = match logits_for {
                        LogitsFor::AllTokens => t,
                        LogitsFor::LastToken => 1,
                    };
                    let head = w.lm_head();
                    product(out, head, head.n_rows, rows, false, norm, Fusion::None)
                }
                (op, ..) => unreachable!("{op:?} belongs to a layer"),
            }
        };
        push(&mut out, None, Op::Embed);
        for l in 0..self.layers.len() {
            for op in self.layer_ops(l, t, pos0) {
                push(&mut out, Some(l), op);
            }
        }
        for op in self.head_ops() {
            push(&mut out, None, op);
        }
        out
    }
}
