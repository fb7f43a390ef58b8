//! What this adapter and this model can do together, as rows with numbers. Anything coco
//! can't run is a "not yet" row, reported before the bulk of the weights is downloaded.

use crate::gguf::{GgmlType, Header};
use crate::model::{Config, ConfigError};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    Ok,
    /// Works, with a caveat worth showing (e.g. no shader-f16).
    Note,
    NotYet,
    /// The file itself is broken (contradictory or missing metadata): no GPU would run it.
    Invalid,
}

#[derive(Clone, Debug)]
pub struct Row {
    pub name: &'static str,
    pub status: Status,
    pub detail: String,
}

/// The adapter facts the check needs (plain values, so the web page can pass its own).
#[derive(Clone, Debug)]
pub struct AdapterFacts {
    pub description: String,
    pub max_binding_bytes: u64,
    pub max_buffer_bytes: u64,
    pub max_invocations_per_workgroup: u32,
    pub shader_f16: bool,
    pub subgroups: bool,
    /// Storage bindings must start at a multiple of this many bytes.
    pub storage_offset_alignment: u32,
}

#[derive(Clone, Debug)]
pub struct Report {
    pub rows: Vec<Row>,
    /// Estimated GPU memory: weights + KV cache + activations.
    pub gpu_bytes: u64,
}

impl Report {
    pub fn is_ok(&self) -> bool {
        self.rows
            .iter()
            .all(|r| !matches!(r.status, Status::NotYet | Status::Invalid))
    }

    /// The "invalid file" rows joined into one message, if the file is broken.
    pub fn invalid(&self) -> Option<String> {
        let rows: Vec<String> = self
            .rows
            .iter()
            .filter(|r| r.status == Status::Invalid)
            .map(|r| format!("{}: {}", r.name, r.detail))
            .collect();
        (!rows.is_empty()).then(|| rows.join("; "))
    }

    /// The "not yet" rows joined into one message.
    pub fn blockers(&self) -> String {
        self.rows
            .iter()
            .filter(|r| r.status == Status::NotYet)
            .map(|r| format!("{}: {}", r.name, r.detail))
            .collect::<Vec<_>>()
            .join("; ")
    }

    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for r in &self.rows {
            let mark = match r.status {
                Status::Ok => "ok     ",
                Status::Note => "note   ",
                Status::NotYet => "NOT YET",
                Status::Invalid => "INVALID",
            };
            s.push_str(&format!("  [{mark}] {:<22} {}\n", r.name, r.detail));
        }
        s.push_str(&format!(
            "  estimated GPU memory: {:.1} MiB\n",
            self.gpu_bytes as f64 / (1 << 20) as f64
        ));
        s
    }
}

/// What a phi3 file was read as: its fused tensors split at load, LongRoPE's factor set for
/// this context and its attention factor, and the sliding window that (as in llama.cpp) is
/// not applied.
fn phi3_extras(c: &Config, header: &Header, context: u32) -> String {
    if c.arch != crate::model::Arch::Phi3 {
        return String::new();
    }
    let fused = if header.tensor("blk.0.attn_qkv.weight").is_some() {
        "Q/K/V and gate/up"
    } else {
        "gate/up"
    };
    let mut s = format!(", fused {fused} split into separate tensors at load");
    if let Some(lr) = c.long_rope {
        // the session clamps its context to the trained one (engine::Session::new)
        let context = context.min(c.context_length);
        let set = if context > lr.original_context {
            "long"
        } else {
            "short"
        };
        s.push_str(&format!(
            ", LongRoPE ({set} factors: {context} positions vs original context {}; attention factor {:.4})",
            lr.original_context, c.rope_attn_factor
        ));
    }
    let key = "phi3.attention.sliding_window";
    if let Ok(Some(w)) = header.metadata.opt_u32(key) {
        if w > 0 {
            s.push_str(&format!(
                ", sliding window {w} not applied (full causal attention, as llama.cpp)"
            ));
        }
    }
    s
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

/// Checks `header` against the adapter for a session of `context` positions.
pub fn check(header: &Header, adapter: &AdapterFacts, context: u32) -> Report {
    let mut rows = Vec::new();
    rows.push(Row {
        name: "adapter",
        status: Status::Ok,
        detail: adapter.description.clone(),
    });
    rows.push(Row {
        name: "shader-f16",
        status: if adapter.shader_f16 { Status::Ok } else { Status::Note },
        detail: if adapter.shader_f16 {
            "available (f16 weights still read as packed pairs with unpack2x16float)".into()
        } else {
            "absent: f16 weights are read as packed pairs with unpack2x16float; arithmetic stays f32".into()
        },
    });
    if adapter.max_invocations_per_workgroup < 256 {
        rows.push(Row {
            name: "workgroup size",
            status: Status::NotYet,
            detail: format!(
                "adapter allows {} invocations per workgroup; coco's kernels need 256",
                adapter.max_invocations_per_workgroup
            ),
        });
    }
    let config = match Config::from_gguf(header) {
        Ok(c) => {
            // smollm3: which layers attend without positions (layer l when (l + 1) % step == 0)
            let no_rope = match c.no_rope_layer_step {
                Some(step) => format!(
                    ", no RoPE on every {step}th layer (layers {}, {}, …: {} of {})",
                    step - 1,
                    2 * step - 1,
                    c.n_layers / step,
                    c.n_layers
                ),
                None => String::new(),
            };
            // Phi-4-mini: RoPE turns only the first rope_dims of each head
            let partial_rope = if c.rope_dims < c.head_dim {
                format!(
                    ", RoPE on {} of {} dimensions per head",
                    c.rope_dims, c.head_dim
                )
            } else {
                String::new()
            };
            // granite: its four multipliers, as read (1 / 1/√head_dim where unset)
            let multipliers = if c.arch == crate::model::Arch::Granite {
                format!(
                    ", multipliers: embedding {}, attention {}, residual {}, logits ÷ {}",
                    c.embed_scale, c.attn_scale, c.residual_scale, c.logit_scale
                )
            } else {
                String::new()
            };
            rows.push(Row {
                name: "architecture",
                status: Status::Ok,
                detail: format!(
                    "{}: {} layers, dim {}, heads {}/{} × {}, ffn {}, vocab {}{}{}{partial_rope}{}{}{no_rope}{multipliers}",
                    c.arch.name(),
                    c.n_layers,
                    c.dim,
                    c.n_heads,
                    c.n_kv_heads,
                    c.head_dim,
                    c.ffn_dim,
                    c.vocab_size,
                    // what the forward adds to the plain llama graph, so a qwen2/qwen3 (or
                    // llama/smollm3) file shows which of the two it was read as
                    if c.qkv_bias { ", Q/K/V biases" } else { "" },
                    if c.qk_norm {
                        ", per-head Q/K norms"
                    } else {
                        ""
                    },
                    phi3_extras(&c, header, context),
                    softcaps(&c),
                ),
            });
            Some(c)
        }
        Err(e) => {
            let name = if matches!(e, ConfigError::UnsupportedArch(_)) {
                "architecture"
            } else {
                "model metadata"
            };
            // A broken file is not a limitation of this GPU or of coco: say which it is.
            let (status, detail) = if e.is_not_yet() {
                (Status::NotYet, e.to_string())
            } else {
                (Status::Invalid, format!("invalid model file: {e}"))
            };
            rows.push(Row {
                name,
                status,
                detail,
            });
            None
        }
    };

    // The tokenizer kind: a vocabulary coco can't tokenize yet (e.g. Mistral NeMo's `tekken`
    // pre-tokenizer) is refused here, before the weights. A broken or missing vocabulary is left
    // to the loader's full read, which names the key.
    use crate::tokenizer::{Tokenizer, TokenizerError};
    if let Err(e @ (TokenizerError::UnsupportedModel(_) | TokenizerError::UnsupportedPre(_))) =
        Tokenizer::check_kind(&header.metadata)
    {
        rows.push(Row {
            name: "tokenizer",
            status: Status::NotYet,
            detail: e.to_string(),
        });
    }

    // Quant types.
    let mut counts: std::collections::BTreeMap<GgmlType, (usize, u64)> = Default::default();
    for t in &header.tensors {
        let e = counts.entry(t.ty).or_default();
        e.0 += 1;
        e.1 += t.n_bytes;
    }
    let unsupported: Vec<String> = counts
        .iter()
        .filter(|(ty, _)| !ty.is_supported())
        .map(|(ty, (n, b))| format!("{ty} ({n} tensors, {})", mib(*b)))
        .collect();
    let summary = counts
        .iter()
        .map(|(ty, (n, _))| format!("{ty}×{n}"))
        .collect::<Vec<_>>()
        .join(", ");
    if unsupported.is_empty() {
        rows.push(Row {
            name: "weight types",
            status: Status::Ok,
            detail: summary,
        });
    } else {
        rows.push(Row {
            name: "weight types",
            status: Status::NotYet,
            detail: format!(
                "not yet: {}; supported: {}",
                unsupported.join(", "),
                GgmlType::SUPPORTED
                    .iter()
                    .map(|t| t.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }

    // Binding limits: tensors are split by rows, so each single row must fit.
    // A tensor larger than one binding is bound in ranges of whole rows, so only a single row
    // over the limit can't be read.
    let largest = header.tensors.iter().max_by_key(|t| t.n_bytes);
    let widest = header.tensors.iter().max_by_key(|t| t.row_bytes());
    if let (Some(t), Some(w)) = (largest, widest) {
        let split = t.n_bytes > adapter.max_binding_bytes;
        let detail = if w.row_bytes() > adapter.max_binding_bytes {
            format!(
                "`{}` has rows of {} each, over the max binding {}: a row can't be split across bindings",
                w.name,
                mib(w.row_bytes()),
                mib(adapter.max_binding_bytes),
            )
        } else {
            format!(
                "`{}` {} vs max binding {}{}",
                t.name,
                mib(t.n_bytes),
                mib(adapter.max_binding_bytes),
                if split { " (bound in row ranges)" } else { "" }
            )
        };
        rows.push(Row {
            name: "largest tensor",
            status: if w.row_bytes() <= adapter.max_binding_bytes {
                Status::Ok
            } else {
                Status::NotYet
            },
            detail,
        });
    }

    let mut gpu_bytes = header.total_tensor_bytes();
    if let Some(c) = &config {
        use crate::model::{widening_extra_bytes, widenings};
        gpu_bytes += widening_extra_bytes(header, &widenings(c, header, adapter.max_binding_bytes));
        // The logits step binds one row of the residual stream by offset.
        let row_bytes = c.dim as u64 * 4;
        let align = adapter.storage_offset_alignment.max(1) as u64;
        if !row_bytes.is_multiple_of(align) {
            rows.push(Row {
                name: "row alignment",
                status: Status::NotYet,
                detail: format!(
                    "not yet: a {row_bytes}-byte residual row (dim {}) is not a multiple of this adapter's {align}-byte storage offset alignment",
                    c.dim
                ),
            });
        }
        let kv_layer = c.kv_layer_bytes(context);
        let kv = c.kv_cache_bytes(context);
        rows.push(Row {
            name: "KV cache",
            status: if kv_layer <= adapter.max_binding_bytes && kv_layer <= adapter.max_buffer_bytes
            {
                Status::Ok
            } else {
                Status::NotYet
            },
            detail: format!(
                "{context} positions: {} in all, {} per layer K or V (max binding {})",
                mib(kv),
                mib(kv_layer),
                mib(adapter.max_binding_bytes)
            ),
        });
        gpu_bytes += kv;
        // The larger of a generation session's scratch and a `coco logits` session's.
        use crate::model::{Scratch, LOGITS_ROWS, PREFILL_CHUNK};
        gpu_bytes += Scratch::bytes_for(c, PREFILL_CHUNK, 1).max(Scratch::bytes_for(
            c,
            LOGITS_ROWS,
            LOGITS_ROWS,
        ));
    }
    Report { rows, gpu_bytes }
}

/// Gemma 2's soft-caps, for the architecture row: ", attention soft-cap 50, final soft-cap 30".
fn softcaps(c: &Config) -> String {
    let mut out = String::new();
    if let Some(cap) = c.attn_softcap {
        out += &format!(", attention soft-cap {cap}");
    }
    if let Some(cap) = c.final_softcap {
        out += &format!(", final soft-cap {cap}");
    }
    out
}
