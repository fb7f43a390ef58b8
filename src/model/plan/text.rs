//! The plan in words: the fusion plan `coco info -v` prints and the page shows, one line per
//! step, layers with the same plan grouped (`Plan::lines`, `Display`).

use std::fmt;

use super::*;

impl Plan {
    /// One `(step, detail)` line per step of the plan, layers with the same plan grouped.
    pub fn lines(&self) -> Vec<PlanLine> {
        let mut lines = Vec::new();
        let mut line = |step: &str, detail: String| {
            lines.push(PlanLine {
                step: step.to_string(),
                detail,
            })
        };
        line(
            "pipeline",
            match self.pipeline {
                Pipeline::Fused => format!("fused, on {}", self.facts.device),
                Pipeline::Unfused => format!(
                    "unfused (one kernel per operation, the A/B baseline), on {}",
                    self.facts.device
                ),
            },
        );
        line("products", self.products_rule());
        line("attention", self.attention_rule());
        line("embed", format!("get_rows ({})", self.facts.embed));
        // One line per step and distinct form, naming the layers that take it (gemma3's
        // local and global layers, a quant mix's Q/K/V types), steps in model order.
        let mut steps: Vec<(&'static str, Forms)> = Vec::new();
        for (l, lp) in self.layers.iter().enumerate() {
            for (step, detail) in self.layer_lines(lp) {
                let forms = match steps.iter_mut().find(|(s, _)| *s == step) {
                    Some((_, forms)) => forms,
                    None => {
                        steps.push((step, Vec::new()));
                        &mut steps.last_mut().expect("just pushed").1
                    }
                };
                match forms.iter_mut().find(|(d, _)| *d == detail) {
                    Some((_, layers)) => layers.push(l),
                    None => forms.push((detail, vec![l])),
                }
            }
        }
        for (step, forms) in steps {
            for (detail, layers) in forms {
                let which = if layers.len() == self.layers.len() {
                    "every layer".to_string()
                } else {
                    layer_ranges(&layers)
                };
                line(step, format!("{which}: {detail}"));
            }
        }
        line(
            "lm head",
            if self.lm_head_norm {
                format!(
                    "final norm folded into the vocabulary product ({})",
                    self.facts.lm_head
                )
            } else {
                format!(
                    "final norm, then the vocabulary product ({})",
                    self.facts.lm_head
                )
            },
        );
        if let Some(cap) = self.final_softcap {
            line(
                "softcap",
                format!(
                    "logits <- {cap}·tanh(logits / {cap}) as the vocabulary product stores \
                     them (no dispatch of its own), before any sampling"
                ),
            );
        }
        if let Some(m) = &self.megakernel {
            let state = if m.on { "on" } else { "asked for, not run" };
            line("megakernel", format!("{state}: {}", m.why));
        }
        lines
    }

    fn products_rule(&self) -> String {
        let mv = self.kernels.matvec.label();
        // COCO_MATVEC's x' staging of the lane-per-8 matvec (the chunk matvec always stages).
        let staged = match (self.kernels.matvec, matvec_shape().stage_x) {
            (MatmulVariant::MatvecChunk | MatmulVariant::MatvecSubgroup, StageX::Normed) => {
                ", x' staged for the normed products"
            }
            (MatmulVariant::MatvecChunk | MatmulVariant::MatvecSubgroup, StageX::All) => {
                ", x' staged where K fits"
            }
            _ => "",
        };
        let matvec = if self.kernels.matvec == MatmulVariant::MatvecChunk {
            format!(
                "{mv} where K >= {}, else {}{staged}{}",
                chunk_min_k(),
                MatmulVariant::MatvecSubgroup.label(),
                if matvec_shape().int8 && crate::gpu::packed_4x8_dot() {
                    let wide = CHUNK_WIDE
                        .iter()
                        .map(|(slots, groups)| format!("{slots} where that leaves >= {groups}"))
                        .collect::<Vec<_>>()
                        .join(", ");
                    let short = chunk_short_k_min()
                        .map(|(k, rows)| format!(", also where K >= {k} over >= {rows} rows"))
                        .unwrap_or_default();
                    format!(
                        "; x' as int8 levels for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K on \
                         the chunk matvec{short}; rows per workgroup: {wide} workgroups"
                    )
                } else {
                    String::new()
                }
            ) + &chunk_splits_override().map_or_else(
                || {
                    let (min_k, max_groups, ways) = AUTO_SPLIT;
                    format!(
                        "; K split {ways} ways in decode steps where K >= {min_k} over <= \
                         {max_groups} row groups"
                    )
                },
                |n| format!("; K split {n} ways (COCO_CHUNK_SPLITS)"),
            )
        } else {
            format!("{mv}{staged}")
        };
        let target = tile_split_target_override().unwrap_or(TILE_SPLIT_TARGET);
        let split = if target > 0 {
            format!(
                "; the 64 x 64 tiles split K among workgroups up to a grid of {target} \
                 (ranges of >= {TILE_SPLIT_MIN_CHUNKS} chunks)"
            )
        } else {
            "; the tiles never split K (COCO_TILE_SPLIT_TARGET=0)".to_string()
        };
        let rule = match self.matvec_max_t {
            None => format!(
                "{matvec} for every step (a CPU adapter: the tiles' barriers cost more than \
                 reading W once per token)"
            ),
            Some(max) => format!(
                "steps of <= {max} tokens: {matvec}; longer steps: {}",
                match (self.kernels.tiled, self.kernels.gemm) {
                    (tiles, _) if tiles.is_coop() => {
                        let stream = if coop_stream() {
                            format!(
                                "{} up to {COOP_STREAM_MAX_T} tokens (x' staged once as f16 \
                                 rows; COCO_COOP_STREAM=1), ",
                                MatmulVariant::CoopStream(self.kernels.coop_block).label()
                            )
                        } else {
                            String::new()
                        };
                        let short = if tiles == MatmulVariant::Coop128 {
                            let small = coop128_min_groups().map_or_else(String::new, |n| {
                                format!(
                                    " and where the 128 x 128 grid holds < {n} workgroups \
                                     (COCO_COOP128_MIN_GROUPS)"
                                )
                            });
                            match coop64_max_t() {
                                0 => String::new(),
                                max => format!(
                                    "{} up to {max} tokens for products of < {COOP64_MAX_WEIGHTS} \
                                     weights (COCO_COOP64_MAX_WEIGHTS){small}, else ",
                                    MatmulVariant::TiledCoop.label()
                                ),
                            }
                        } else {
                            String::new()
                        };
                        let vec = if coop_vec_stage() {
                            ", vec4 staging stores (COCO_COOP_VEC_STAGE=0: scalar)"
                        } else {
                            ", scalar staging stores (COCO_COOP_VEC_STAGE=0)"
                        };
                        let sg64 = if coop_prestage() && coop_subgroup_tile64() {
                            ", 64 x 64 per subgroup in the 128-token tiles \
                             (COCO_COOP_SUBGROUP_TILE=64)"
                        } else {
                            ""
                        };
                        let staging = if coop_prestage() {
                            "matmul_token_scale_x16: x' staged once as scaled f16 rows, where \
                             the device holds the tiles' workgroup arrays (the 128-token ones \
                             need 48 KiB; COCO_COOP_PRESTAGE=0: each tile stages x')"
                        } else {
                            "matmul_token_scale: per-token f16 scales; the tiles stage x' \
                             (COCO_COOP_PRESTAGE=0)"
                        };
                        format!(
                            "{stream}{short}{} (f16 tensor cores, each after {staging}{sg64}{vec}; \
                             COCO_COOPMAT=0: the portable tiles)",
                            tiles.label()
                        )
                    }
                    (MatmulVariant::MatrixI8 { .. }, _) => format!(
                        "{} (the browser's int8 subgroup matrices, experimental: gemm=matrix) \
                         where the weight type has int8 levels, else the portable tiles",
                        MatmulVariant::MatrixI8 { emulated: false }.label()
                    ),
                    (MatmulVariant::Dot4I8, _) => format!(
                        "{} (weight levels by x' as one int8 level on dot4I8Packed: gemm=dot4) where the weight type has \
                         int8 levels, else the portable tiles",
                        MatmulVariant::Dot4I8.label()
                    ),
                    (_, GemmChoice::Auto | GemmChoice::Matrix | GemmChoice::Dot4) => {
                        let f16 = self.kernels.wide_f16;
                        let precision = if f16 {
                            " (f16: shader-f16, sums in f16 per 32 of K, the fused Q/K/V on \
                             them too; COCO_WIDE_F16=0: f32)"
                        } else {
                            " (f32; the fused Q/K/V on the 64 x 64 tiles)"
                        };
                        format!(
                            "the first of {}{precision} that leaves >= {WIDE_MIN_GROUPS} \
                             workgroups, else {}",
                            WideTile::ALL
                                .map(|w| MatmulVariant::Wide(if f16 { w.f16() } else { w }).label())
                                .join(", "),
                            MatmulVariant::Tiled.label()
                        )
                    }
                    (_, GemmChoice::Tiled) =>
                        format!("{} (asked for by name)", MatmulVariant::Tiled.label()),
                    (_, GemmChoice::Force(w)) => {
                        format!("{} (asked for by name)", MatmulVariant::Wide(w).label())
                    }
                }
            ),
        };
        match self.matvec_max_t {
            Some(_) => rule + &split,
            None => rule,
        }
    }

    fn attention_rule(&self) -> String {
        let split = match self.attention_merge {
            AttentionMerge::InSplit => "attention_split_merge: the last range's workgroup merges",
            AttentionMerge::Separate => {
                "attention_split + attention_combine: attn_merge=separate / COCO_ATTN_MERGE"
            }
        };
        let cap = if self.attn_softcap > 0.0 {
            format!(
                "; scores soft-capped, {0}·tanh(s / {0}), in the score step of both",
                self.attn_softcap
            )
        } else {
            String::new()
        };
        let blocked = if self.attention_blocked {
            ", its scores in 2 x 2 blocks and larger tiles where they fit (COCO_ATTN_BLOCKED=1)"
        } else {
            ""
        };
        let coop = match self.attention_coop_tile {
            Some((bq, bk)) => format!(
                "; steps of {COOP_MIN_T}+ tokens on tensor cores, {bq} queries x {bk} keys a tile \
                 (_coop; COCO_ATTN_COOP=0 keeps the f32 tiles)"
            ),
            None => String::new(),
        };
        let keys = match attention::decode_split_keys(self.heads, self.head_dim) {
            Some(n) => format!("{n}+ keys"),
            None => format!("more than {DECODE_SPLIT_SEARCH} keys"),
        };
        format!(
            "flash-decoding ({split}) while steps x {} heads <= {SPLIT_MAX_ROWS} rows and the \
             last token sees {keys} (a decode step; COCO_ATTN_RANGE_KIB), else one pass \
             (attention_tiled_hd{}{blocked}{coop}){cap}",
            self.heads, self.head_dim
        )
    }

    fn layer_lines(&self, lp: &LayerPlan) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let bias = if lp.biases { " (+ biases)" } else { "" };
        let rope = rope_name(self.rope);
        let qkv = if lp.qkv_one.on {
            format!(
                "Q/K/V{bias} in one dispatch, attention norm folded in ({})",
                lp.qkv_one.why
            )
        } else if self.pipeline == Pipeline::Fused {
            format!(
                "Q, K, V{bias} as three products, each with the attention norm folded in ({})",
                lp.qkv_one.why
            )
        } else {
            format!("attention norm, then Q, K, V{bias} as three products")
        };
        let no_rope = "no RoPE (a NoPE layer): the KV-cache write alone";
        let rope_kv = if lp.rope {
            format!("RoPE ({rope}) and the KV-cache write in one")
        } else {
            no_rope.to_string()
        };
        if self.pipeline == Pipeline::Unfused {
            out.push(("qkv", qkv));
            if lp.qk_norm.is_some() {
                out.push(("qk norm", "per-head Q and K norms, two dispatches".into()));
            }
            out.push((
                "rope",
                if lp.rope {
                    format!("RoPE ({rope}) on q, on k, then the KV-cache write")
                } else {
                    no_rope.to_string()
                },
            ));
        } else {
            let matvec_steps = match self.matvec_max_t {
                None => "every step".to_string(),
                Some(max) => format!("steps of <= {max} tokens"),
            };
            // Where Q/K/V, RoPE and the KV write don't share the matvec: the rope dispatch,
            // with the per-head Q/K norms folded in or as two of their own.
            let rope_lines = |out: &mut Vec<(&'static str, String)>, steps: &str| match &lp.qk_norm
            {
                Some(q) if q.on => out.push((
                    "rope",
                    format!(
                        "{steps}per-head Q/K norms, RoPE ({rope}) and the KV-cache write in \
                             one dispatch ({})",
                        q.why
                    ),
                )),
                Some(q) => {
                    out.push((
                        "qk norm",
                        format!("{steps}two in-place dispatches ({})", q.why),
                    ));
                    out.push(("rope", format!("{steps}{rope_kv}")));
                }
                None => out.push(("rope", format!("{steps}{rope_kv}"))),
            };
            if lp.qkv_rope.on {
                let qk = if lp.qk_norm.is_some() {
                    " the per-head Q/K norms,"
                } else {
                    ""
                };
                let qkv_parts = if lp.v_apart { "Q/K" } else { "Q/K/V" };
                out.push((
                    "qkv+rope",
                    format!(
                        "attention norm, {qkv_parts}{bias},{qk} RoPE ({rope}) and the KV-cache \
                         write in one matvec on {matvec_steps} ({})",
                        lp.qkv_rope.why
                    ),
                ));
                if lp.v_apart {
                    out.push((
                        "v",
                        format!(
                            "attention norm and V{bias} into the V-cache rows in a product of \
                             its own on {matvec_steps} (W_v's type differs)"
                        ),
                    ));
                }
                if self.matvec_max_t.is_some() {
                    out.push(("qkv", format!("longer steps: {qkv}")));
                    rope_lines(&mut out, "longer steps: ");
                }
            } else {
                out.push((
                    "qkv",
                    format!("{qkv}; RoPE not in the matvec: {}", lp.qkv_rope.why),
                ));
                rope_lines(&mut out, "");
            }
        }
        let window = if lp.window > 0 {
            format!("sliding window of {} positions", lp.window)
        } else {
            "full causal".to_string()
        };
        out.push(("window", window));
        let post_norm = |w: &str| match &lp.post_norm_fold {
            Some(fold) if fold.on => format!(
                "{w} with its post-norm added into the residual stream by the product's last \
                 workgroup on matvec steps ({}); else {w}, then the post-norm",
                fold.why
            ),
            Some(fold) => format!(
                "{w}, then its post-norm added into the residual stream ({})",
                fold.why
            ),
            None => format!("{w} added into the residual stream by the product"),
        };
        out.push(("o proj", post_norm("W_o")));
        let act = match self.act {
            Activation::Silu => "SiLU",
            Activation::GeluTanh => "GELU-tanh",
        };
        out.push((
            "ffn",
            match &lp.ffn {
                FfnPlan::Megakernel => {
                    "the megakernel: norm, gate/up, activation, down and residual in one \
                     dispatch, one workgroup per token"
                        .into()
                }
                FfnPlan::Glu(why) => {
                    format!("FFN norm, gate/up and {act} in one dispatch ({why})")
                }
                FfnPlan::Separate(why) => {
                    format!("FFN norm, gate, up, then {act} x up: four dispatches ({why})")
                }
            },
        ));
        if lp.ffn != FfnPlan::Megakernel {
            out.push(("down", post_norm("W_down")));
        }
        if lp.o_levels_steps != 0 {
            out.push((
                "o levels",
                format!(
                    "the attention merge also writes W_o's x' as int8 levels, which W_o reads \
                     instead of quantizing it in each workgroup, on steps of {} whose keys are \
                     split (COCO_O_LEVELS=0: off)",
                    token_sets(lp.o_levels_steps)
                ),
            ));
        }
        if lp.ffn_levels_steps != 0 {
            out.push((
                "levels",
                format!(
                    "the gate/up dispatch also writes W_down's x' as int8 levels, which W_down                      reads instead of quantizing it in each workgroup, on steps of {}                      (COCO_FFN_LEVELS=0: off)",
                    token_sets(lp.ffn_levels_steps)
                ),
            ));
        }
        out
    }
}

/// "1-32 tokens": the step sizes whose bits (t − 1) are set, as ranges.
fn token_sets(bits: u64) -> String {
    let sizes: Vec<usize> = (1..=64).filter(|t| bits >> (t - 1) & 1 == 1).collect();
    let ranges = layer_ranges(&sizes);
    format!(
        "{} tokens",
        ranges
            .trim_start_matches("layers ")
            .trim_start_matches("layer ")
    )
}

/// A printed step's distinct forms: each detail with the layers that take it.
type Forms = Vec<(String, Vec<usize>)>;

/// "layer 5", "layers 0-4, 6-10, 12".
fn layer_ranges(layers: &[usize]) -> String {
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for &l in layers {
        match ranges.last_mut() {
            Some((_, last)) if *last + 1 == l => *last = l,
            _ => ranges.push((l, l)),
        }
    }
    let text: Vec<String> = ranges
        .iter()
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect();
    let noun = if layers.len() == 1 { "layer" } else { "layers" };
    format!("{noun} {}", text.join(", "))
}

pub(super) fn rope_name(layout: RopeLayout) -> &'static str {
    match layout {
        RopeLayout::Normal => "normal",
        RopeLayout::Neox => "neox",
    }
}

/// One printed step of a [`Plan`]: its name and what it does, with the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlanLine {
    pub step: String,
    pub detail: String,
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        let lines = self.lines();
        let width = lines.iter().map(|l| l.step.len()).max().unwrap_or(0);
        for l in lines {
            writeln!(f, "  {:<width$}  {}", l.step, l.detail)?;
        }
        Ok(())
    }
}
