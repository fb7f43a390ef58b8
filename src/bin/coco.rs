//! The native CLI. Other tools drive it, so the flags and JSON shapes are a contract:
//! `run`, `logits`, `tokenize`, `info`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use coco::bench::{ProfileError, ProfileRecord, ProfiledStep, StepProfile};
use coco::capabilities;
use coco::engine::{load_path, LogitsFor, Model, Session};
use coco::gpu::GpuContext;
use coco::sampler::SamplerConfig;
use serde_json::json;

#[derive(Parser)]
#[command(
    name = "coco",
    version,
    about = "LLM inference from GGUF files on the GPU (wgpu)"
)]
struct Cli {
    /// Print the adapter and load details to stderr.
    #[arg(short, long, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct ModelArgs {
    /// GGUF model file.
    #[arg(short, long)]
    model: PathBuf,
    /// KV-cache positions for the session.
    #[arg(long, default_value_t = 2048)]
    ctx: u32,
}

/// Which forward pipeline runs (`coco run` and `coco bench`).
#[derive(Args)]
struct PipelineArgs {
    /// One kernel per operation instead of the fused pipeline (the A/B baseline, debugging).
    #[arg(long)]
    unfused: bool,
    /// Run each FFN as the one-workgroup-per-token megakernel (slow on purpose: the A/B
    /// lesson). Checked against the normal path first; refused if the check fails. `coco
    /// bench` reports the megakernel A/B either way; this makes it the headline run.
    #[arg(long)]
    megakernel: bool,
    /// Sample on the CPU, reading every token's logits back, instead of on the GPU (A/B and
    /// debugging; the same tokens).
    #[arg(long)]
    cpu_sampling: bool,
}

/// `coco bench`'s options.
#[derive(Args)]
struct BenchArgs {
    #[arg(short, long)]
    model: PathBuf,
    /// Prompt tokens (pp).
    #[arg(short = 'p', long, default_value_t = 512)]
    prompt: u32,
    /// Generated tokens (tg).
    #[arg(short = 'n', long, default_value_t = 128)]
    n: u32,
    /// Tokens in the KV cache before pp and tg are timed, as llama-bench's `-d`: 0 times tg
    /// from an empty cache (pp512 and tg128 are separate tests, not tg after the prompt).
    #[arg(short = 'd', long, default_value_t = 0)]
    depth: u32,
    #[arg(long, default_value_t = 5)]
    reps: u32,
    /// Measure read bandwidth, dispatch cost and round trip to compute the floor.
    #[arg(long)]
    probe: bool,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    pipeline: PipelineArgs,
    /// Also time one decode step per kernel with timestamp queries (one pass per
    /// dispatch; the real one-pass step time is shown beside it), at the middle of tg's
    /// positions, and the prompt's prefill step at the depth.
    #[arg(long)]
    profile: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Generate text from a prompt (streams to stdout).
    Run {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(short, long)]
        prompt: String,
        /// Tokens to generate.
        #[arg(short = 'n', long, default_value_t = 128)]
        n: u32,
        /// 0 = greedy.
        #[arg(long, default_value_t = 0.8)]
        temp: f32,
        /// 0 = off (then the 1,024 most likely tokens are the candidates); at most 1024.
        #[arg(long, default_value_t = 40)]
        top_k: u32,
        #[arg(long, default_value_t = 0.95)]
        top_p: f32,
        #[arg(long, default_value_t = 0.05)]
        min_p: f32,
        /// 1 = off.
        #[arg(long, default_value_t = 1.1)]
        repeat_penalty: f32,
        /// Tokens the penalty looks back over (at most 512).
        #[arg(long, default_value_t = 64)]
        repeat_last_n: u32,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// Print one JSON object (ids, text, stats) instead of streaming text.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        pipeline: PipelineArgs,
    },
    /// Teacher-forced logits for every prompt position.
    Logits {
        #[command(flatten)]
        model: ModelArgs,
        #[arg(short, long)]
        prompt: String,
        /// Entries per position.
        #[arg(long, default_value_t = 10)]
        top: usize,
        #[arg(long)]
        json: bool,
    },
    /// Token ids of a text.
    Tokenize {
        #[arg(short, long)]
        model: PathBuf,
        #[arg(short, long)]
        text: String,
        /// Add BOS/EOS as the metadata says and parse special-token text.
        #[arg(long)]
        special: bool,
        #[arg(long)]
        json: bool,
    },
    /// Prompt-processing and generation speed (medians), dispatches/token, % of the floor.
    Bench(BenchArgs),
    /// The adapter's ceilings, no model needed: read bandwidth, dispatch cost and round trip
    /// (what `bench --probe` adds), f32 FMA TFLOP/s and the tensor cores' through wgpu's
    /// cooperative matrices.
    Probe {
        /// Only the arithmetic ceilings (seconds on a software adapter; the read probe
        /// streams up to 1 GiB 20 times).
        #[arg(long)]
        compute_only: bool,
        #[arg(long)]
        json: bool,
    },
    /// Architecture, hyperparameters, tensors, and the capability check for this adapter;
    /// with -v also every tensor, and the fusion plan (loads the model onto the GPU).
    Info {
        #[arg(short, long)]
        model: PathBuf,
        #[arg(long, default_value_t = 2048)]
        ctx: u32,
        /// With -v: the plan of the unfused pipeline instead of the fused one.
        #[arg(long)]
        unfused: bool,
    },
}

fn pipeline(unfused: bool) -> coco::model::Pipeline {
    if unfused {
        coco::model::Pipeline::Unfused
    } else {
        coco::model::Pipeline::Fused
    }
}

/// `--megakernel`: runs the check, prints it to stderr, and refuses unless it passed.
fn switch_on_megakernel(session: &mut Session) -> Result<()> {
    let check = session.set_megakernel_blocking(true)?;
    eprintln!("{check}");
    if !check.passed {
        bail!("--megakernel refused: its output differs from the normal FFN path ({check})");
    }
    Ok(())
}

fn open_gpu(verbose: bool) -> Result<Arc<GpuContext>> {
    let ctx = Arc::new(GpuContext::new_blocking().context("opening the GPU")?);
    if verbose {
        eprintln!(
            "adapter: {} | driver {} {} | f16 {} | subgroups {} | max binding {} MiB",
            ctx.describe(),
            ctx.info.driver,
            ctx.info.driver_info,
            ctx.has_f16(),
            ctx.has_subgroups(),
            ctx.max_binding_bytes() >> 20
        );
        eprintln!(
            "cooperative matrix: {} | coco's f16 prefill GEMM: {}",
            ctx.cooperative_matrix,
            match ctx.coop_block {
                Some(b) => format!(
                    "on ({b}x{b}x{b} blocks, f16 operands, f32 sums; COCO_COOPMAT=0 turns it off)"
                ),
                None => "off (not offered here, or COCO_COOPMAT=0)".into(),
            }
        );
        let k = coco::kernels::matmul::KernelSettings::of(&ctx);
        eprintln!(
            "kernels: decode {} (COCO_MATVEC={}) up to {} tokens | prefill {} (COCO_GEMM={}) | \
             attention merge {} | decode batches in flight {} (COCO_IN_FLIGHT)",
            k.matvec,
            k.matvec_shape,
            k.matvec_max_t
                .map_or("any number of".into(), |t| t.to_string()),
            k.tiles,
            k.gemm,
            k.attention_merge,
            k.batches_in_flight
        );
        eprintln!(
            "switches: chunk {} (COCO_CHUNK) | chunk splits {} | chunk min K {} | FFN levels {} \
             | W_o levels {} | f16 operands {} | tensor-core prestage {} | vec4 staging {} | \
             conversion-free weight decode {} | split merge {} (64-token tiles by a pass {}) | \
             weights held as loaded {} | f16 wide tiles {} (prefetch {}) | \
             short-step tiles {} | blocked attention {} | tensor-core attention {} | \
             decode key ranges {} (COCO_ATTN_RANGE_KIB) | shader checks {} | subgroups {} ({})",
            k.chunk,
            k.chunk_splits.map_or("planned".into(), |s| s.to_string()),
            k.chunk_min_k.map_or("default".into(), |s| s.to_string()),
            k.ffn_levels,
            k.o_levels,
            k.f16_operands,
            k.coop_prestage,
            k.coop_vec_stage,
            k.coop_half_w,
            k.coop_split_merge,
            k.coop64_split_pass,
            k.coop_raw_w,
            k.wide_f16,
            k.wide_f16_prefetch,
            k.coop_stream,
            k.attention_blocked,
            k.attention_coop,
            k.attention_range_kib
                .map_or("planned".into(), |kib| format!(">= {kib} KiB")),
            k.shader_checks,
            k.subgroups,
            ctx.subgroups.why
        );
        if !k.ablate.is_empty() {
            eprintln!(
                "COCO_ABLATE={}: the prefill tiles leave these parts out; their outputs are \
                 wrong (a timing diagnostic)",
                k.ablate.join(",")
            );
        }
    }
    Ok(ctx)
}

fn load(ctx: &Arc<GpuContext>, args: &ModelArgs, verbose: bool) -> Result<Arc<Model>> {
    let clock = std::time::Instant::now();
    let model = load_path(ctx, &args.model, args.ctx)
        .with_context(|| format!("loading {}", args.model.display()))?;
    if verbose {
        eprintln!(
            "loaded {} ({:.1} MiB, {}) in {:.2}s; tokenizer {}",
            args.model.display(),
            model.weight_bytes as f64 / (1 << 20) as f64,
            model.type_summary,
            clock.elapsed().as_secs_f64(),
            model.tokenizer.kind()
        );
    }
    Ok(Arc::new(model))
}

/// Log records to stderr: by default coco's own warnings only; `COCO_LOG=<level>` (warn,
/// info, debug, trace) shows every crate's records down to that level, wgpu's included
/// (`COCO_LOG=debug` lists each cooperative-matrix configuration the Vulkan driver reports).
struct StderrLog {
    level: log::LevelFilter,
    every_crate: bool,
}

impl log::Log for StderrLog {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= self.level && (self.every_crate || m.target().starts_with("coco"))
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            eprintln!("[{} {}] {}", r.level(), r.target(), r.args());
        }
    }
    fn flush(&self) {}
}

fn init_log() {
    let asked = std::env::var("COCO_LOG")
        .ok()
        .and_then(|v| v.parse::<log::LevelFilter>().ok());
    let logger = StderrLog {
        level: asked.unwrap_or(log::LevelFilter::Warn),
        every_crate: asked.is_some(),
    };
    let level = logger.level;
    if log::set_logger(Box::leak(Box::new(logger))).is_ok() {
        log::set_max_level(level);
    }
}

fn main() -> Result<()> {
    init_log();
    let cli = Cli::parse();
    match cli.command {
        Command::Run {
            model,
            prompt,
            n,
            temp,
            top_k,
            top_p,
            min_p,
            repeat_penalty,
            repeat_last_n,
            seed,
            json,
            pipeline:
                PipelineArgs {
                    unfused,
                    megakernel,
                    cpu_sampling,
                },
        } => {
            let sampler = SamplerConfig {
                temperature: temp,
                top_k,
                top_p,
                min_p,
                repeat_penalty,
                repeat_last_n,
                seed,
            };
            sampler.check()?;
            let ctx = open_gpu(cli.verbose)?;
            let m = load(&ctx, &model, cli.verbose)?;
            let prompt_ids = m.tokenizer.encode(&prompt, true, true);
            if prompt_ids.is_empty() {
                bail!("the prompt encodes to no tokens");
            }
            let mut session = Session::new(&ctx, &m, model.ctx, LogitsFor::LastToken);
            session.pipeline = pipeline(unfused);
            session.cpu_sampling = cpu_sampling;
            if megakernel {
                switch_on_megakernel(&mut session)?;
            }
            let mut decoder = m.tokenizer.stream_decoder().continuing();
            let mut stdout = std::io::stdout();
            let ids = session.generate_blocking(&prompt_ids, n, &sampler, &mut |id| {
                if !json {
                    let piece = decoder.push(id);
                    let _ = stdout.write_all(piece.as_bytes());
                    let _ = stdout.flush();
                }
                true
            })?;
            let s = &session.stats;
            if json {
                let text = m.tokenizer.decode(&ids);
                let stats = json!({
                    "prompt_tokens": s.prompt_tokens,
                    "generated_tokens": s.generated_tokens,
                    "prefill_tok_s": s.prefill_tok_s(),
                    "decode_tok_s": s.decode_tok_s(),
                    "ms_per_token": 1000.0 / s.decode_tok_s().max(1e-9),
                    "steps_per_submit": s.steps_per_submit,
                    "sampler_on_gpu": s.sampler_on_gpu,
                    "dispatches_per_token": s.dispatches_per_token,
                    "stop": s.stop.as_str(),
                });
                println!(
                    "{}",
                    json!({ "prompt_ids": prompt_ids, "ids": ids, "text": text, "stats": stats })
                );
            } else {
                let _ = stdout.write_all(decoder.flush().as_bytes());
                println!();
            }
            if cli.verbose {
                eprintln!(
                    "prefill {} tok {:.1} tok/s | decode {} tok {:.2} tok/s ({:.1} ms/token) | {} dispatches/token | sampling on the {}, up to {} steps per submit",
                    s.prompt_tokens,
                    s.prefill_tok_s(),
                    s.generated_tokens,
                    s.decode_tok_s(),
                    1000.0 / s.decode_tok_s().max(1e-9),
                    s.dispatches_per_token,
                    if s.sampler_on_gpu { "GPU" } else { "CPU" },
                    s.steps_per_submit,
                );
            }
        }
        Command::Logits {
            model,
            prompt,
            top,
            json,
        } => {
            let ctx = open_gpu(cli.verbose)?;
            let m = load(&ctx, &model, cli.verbose)?;
            let ids = m.tokenizer.encode(&prompt, true, true);
            let mut session = Session::new(&ctx, &m, model.ctx, LogitsFor::AllTokens);
            let logits = session.forward_blocking(&ids)?;
            let vocab = m.config.vocab_size as usize;
            let positions: Vec<_> = logits
                .chunks_exact(vocab)
                .map(|row| position_json(row, top))
                .collect();
            let out = json!({ "ids": ids, "positions": positions });
            if json {
                println!("{out}");
            } else {
                println!("{}", serde_json::to_string_pretty(&out)?);
            }
        }
        Command::Tokenize {
            model,
            text,
            special,
            json,
        } => {
            let header = coco::gguf::read_header(&model)
                .with_context(|| format!("reading {}", model.display()))?;
            let tok = coco::tokenizer::Tokenizer::from_gguf(&header.metadata)?;
            let ids = tok.encode(&text, special, special);
            if json {
                println!("{}", json!({ "ids": ids }));
            } else {
                for id in ids {
                    println!("{id}\t{:?}", tok.token_text(id).unwrap_or("?"));
                }
            }
        }
        Command::Bench(args) => bench(args, cli.verbose)?,
        Command::Probe { compute_only, json } => {
            let ctx = open_gpu(cli.verbose)?;
            let value = if compute_only {
                let c = pollster::block_on(coco::bench::probe_compute(&ctx))?;
                if !json {
                    println!("{}: {c}", ctx.describe());
                }
                serde_json::to_value(&c)?
            } else {
                let p = pollster::block_on(coco::bench::probe(&ctx))?;
                if !json {
                    println!(
                        "{}: read {:.0} GB/s, dispatch {:.2} µs, round trip {:.0} µs, {}",
                        ctx.describe(),
                        p.read_gb_s,
                        p.dispatch_us,
                        p.round_trip_us,
                        p.compute
                    );
                    println!("{}", coco::bench::grid_sync_line(&p.grid_sync));
                    println!("{}", coco::bench::matrix_read_line(&p.matrix_reads));
                }
                serde_json::to_value(&p)?
            };
            if json {
                println!("{value}");
            }
        }
        Command::Info {
            model,
            ctx,
            unfused,
        } => info(&model, ctx, cli.verbose, pipeline(unfused))?,
    }
    Ok(())
}

/// `{"top": [[id, logit], …], "lse": x}` for one position; lse over the full vocabulary.
fn position_json(row: &[f32], top: usize) -> serde_json::Value {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = max
        + row
            .iter()
            .map(|&l| (l as f64 - max).exp())
            .sum::<f64>()
            .ln();
    let mut idx: Vec<usize> = (0..row.len()).collect();
    let k = top.min(row.len());
    idx.select_nth_unstable_by(k.saturating_sub(1), |&a, &b| {
        row[b].total_cmp(&row[a]).then(a.cmp(&b))
    });
    idx.truncate(k);
    idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
    let top: Vec<_> = idx.iter().map(|&i| json!([i, row[i]])).collect();
    json!({ "top": top, "lse": lse })
}

fn info(path: &Path, ctx_len: u32, verbose: bool, pipeline: coco::model::Pipeline) -> Result<()> {
    let header =
        coco::gguf::read_header(path).with_context(|| format!("reading {}", path.display()))?;
    println!(
        "file: {} (GGUF v{}, {} tensors, {} metadata keys)",
        path.display(),
        header.version,
        header.tensors.len(),
        header.metadata.entries.len()
    );
    match coco::model::Config::from_gguf(&header) {
        Ok(c) => {
            println!("architecture: {}", c.arch.name());
            println!(
                "  layers {} | dim {} | heads {} (kv {}) × {} | ffn {} | vocab {} | context {}",
                c.n_layers,
                c.dim,
                c.n_heads,
                c.n_kv_heads,
                c.head_dim,
                c.ffn_dim,
                c.vocab_size,
                c.context_length
            );
            println!(
                "  rms eps {:e} | rope {:?} base {} (local {}) scaling {} | window {:?} | attn scale {:.5} | softcap attn {:?} final {:?} | tied {}",
                c.rms_eps, c.rope_style, c.rope_base, c.rope_base_local, rope_scaling_words(&c), c.sliding_window, c.attn_scale, c.attn_softcap, c.final_softcap, c.tied_embeddings
            );
        }
        Err(e) => println!("architecture: {e}"),
    }
    match coco::tokenizer::Tokenizer::from_gguf(&header.metadata) {
        Ok(t) => println!(
            "tokenizer: {} ({} tokens, bos {:?}, eos {:?})",
            t.kind(),
            t.vocab_size(),
            t.bos_id(),
            t.eos_ids()
        ),
        Err(e) => println!("tokenizer: {e}"),
    }
    println!(
        "tensors: {:.1} MiB",
        header.total_tensor_bytes() as f64 / (1 << 20) as f64
    );
    let mut by_type: std::collections::BTreeMap<_, (usize, u64)> = Default::default();
    for t in &header.tensors {
        let e = by_type.entry(t.ty).or_default();
        e.0 += 1;
        e.1 += t.n_bytes;
    }
    for (ty, (n, bytes)) in &by_type {
        println!(
            "  {:<6} {:>4} tensors {:>10.1} MiB",
            ty.name(),
            n,
            *bytes as f64 / (1 << 20) as f64
        );
    }
    if verbose {
        for t in &header.tensors {
            println!("  {:<40} {:<6} {:?}", t.name, t.ty.name(), t.dims);
        }
    }
    let ctx = open_gpu(verbose)?;
    let report = capabilities::check(&header, &ctx.adapter_facts(), ctx_len);
    println!("capability check on {}:", ctx.describe());
    print!("{}", report.to_text());
    if !report.is_ok() {
        bail!("not yet: {}", report.blockers());
    }
    if verbose {
        // The plan needs the weights as loaded (their types and buffer splits on this device).
        let model = load_path(&ctx, path, ctx_len)
            .with_context(|| format!("loading {}", path.display()))?;
        let plan = coco::model::Plan::new(&model, &ctx, pipeline, false);
        let decode = plan.labels(&model, &ctx, 1, 0, LogitsFor::LastToken).len();
        println!("fusion plan ({decode} dispatches per decode step at position 0):");
        print!("{plan}");
    }
    Ok(())
}

fn bench(args: BenchArgs, verbose: bool) -> Result<()> {
    let BenchArgs {
        model: path,
        prompt,
        n,
        depth,
        reps,
        probe,
        json: as_json,
        pipeline:
            PipelineArgs {
                unfused,
                megakernel,
                cpu_sampling,
            },
        profile,
    } = args;
    let ctx = open_gpu(verbose)?;
    let args = ModelArgs {
        model: path.clone(),
        ctx: depth + prompt + n + 8,
    };
    let m = load(&ctx, &args, verbose)?;
    let cfg = coco::bench::BenchConfig {
        prompt_tokens: prompt,
        gen_tokens: n,
        depth,
        reps: reps.max(1),
        pipeline: pipeline(unfused),
    };
    if megakernel {
        let mut s = Session::new(&ctx, &m, args.ctx, LogitsFor::LastToken);
        s.pipeline = cfg.pipeline;
        switch_on_megakernel(&mut s)?;
    }
    let mut r = pollster::block_on(coco::bench::run_with(
        &ctx,
        &m,
        &cfg,
        megakernel,
        cpu_sampling,
    ))?;
    if probe {
        r.probe = Some(pollster::block_on(coco::bench::probe(&ctx))?);
    }
    // --profile: the decode step (as the page charts it) at the middle of tg's positions, so
    // its one-pass time sets against 1 / tg; and the prompt's prefill step at the depth.
    let (depth_ids, tokens) = coco::bench::bench_ids(&m, depth, prompt);
    let profile_of = |context: &[u32], step| {
        profile.then(|| {
            pollster::block_on(coco::bench::profile_step(
                &ctx,
                &m,
                context,
                step,
                cfg.pipeline,
                megakernel,
            ))
        })
    };
    let mid_tg = coco::bench::bench_prompt(&m, r.tg_positions[0] + n / 2);
    let profiled = profile_of(&mid_tg, ProfiledStep::Decode);
    let profiled_prefill = profile_of(&depth_ids, ProfiledStep::Prefill(&tokens));
    let profile_record = |p: &Option<Result<StepProfile, ProfileError>>| -> Result<_> {
        Ok(match p {
            None => None,
            Some(Ok(p)) => Some(ProfileRecord::Step(p.clone())),
            Some(Err(ProfileError::NoTimestampQuery)) => Some(ProfileRecord::NotYet {
                not_yet: ProfileError::NoTimestampQuery.to_string(),
            }),
            Some(Err(ProfileError::Engine(e))) => bail!("profiling: {e}"),
        })
    };
    let name = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut out = r.record(&name, cfg.pipeline);
    out.profile = profile_record(&profiled)?;
    out.prefill_profile = profile_record(&profiled_prefill)?;
    if as_json {
        println!("{}", serde_json::to_string(&out)?);
        return Ok(());
    }
    let mk = &r.megakernel;
    let ab = |v: f64, digits: usize| {
        if v.is_finite() {
            format!("{v:.digits$}")
        } else {
            "-".into()
        }
    };
    // llama-bench's names: "tg128" from an empty cache, "tg128 @ d512" after 512 tokens.
    let at = if depth > 0 {
        format!(" @ d{depth}")
    } else {
        String::new()
    };
    println!("| model | adapter | pp{prompt}{at} tok/s | tg{n}{at} tok/s | tg{n} sampled tok/s | ms/token | dispatches/token | GB/s eff. | floor ms | % of floor | megakernel tg tok/s | megakernel ratio |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    println!(
        "| {name}{} | {} | {:.1} | {:.1} | {:.1} | {:.3} | {} | {:.1} | {} | {} | {} | {} |",
        if mk.headline { " (megakernel)" } else { "" },
        r.adapter,
        r.pp(),
        r.tg(),
        r.tg_sampled(),
        1000.0 / r.tg(),
        r.dispatches_per_token,
        r.effective_gb_s(),
        r.floor_seconds()
            .map_or("-".into(), |f| format!("{:.3}", f * 1000.0)),
        r.fraction_of_floor()
            .map_or("-".into(), |f| format!("{:.0}%", f * 100.0)),
        ab(mk.tg(), 1),
        ab(mk.ratio(), 3),
    );
    println!(
        "tg decoded positions {}–{} ({}); pp prefilled positions {}–{}",
        r.tg_positions[0],
        r.tg_positions[1],
        if depth == 0 {
            "an empty cache but the one token its first draw needs, as llama-bench's tg"
        } else {
            "after the depth's tokens"
        },
        depth,
        depth + r.prompt_tokens - 1,
    );
    println!(
        "tg greedy / with the default sampler (temp 0.8, top-k 40, top-p 0.95, min-p 0.05, penalty 1.1): {:.1} / {:.1} tok/s = {:.1}%, {} / {} dispatches per token, sampling on the {}; the CPU sampler takes {:.2} ms per token on this vocabulary",
        r.tg(),
        r.tg_sampled(),
        100.0 * r.tg_sampled() / r.tg(),
        r.dispatches_per_token,
        r.sampled_dispatches_per_token,
        if r.sampler_on_gpu { "GPU" } else { "CPU (--cpu-sampling)" },
        r.cpu_sampler_ms,
    );
    println!(
        "pp{}: {:.2} ms a prompt, of which the host recorded, encoded and submitted for {:.2} ms",
        r.prompt_tokens,
        1e3 * r.prompt_tokens as f64 / r.pp(),
        r.pp_host_ms,
    );
    if let Some(p) = &r.probe {
        println!(
            "probe: read {:.0} GB/s, dispatch {:.2} µs, round trip {:.0} µs",
            p.read_gb_s, p.dispatch_us, p.round_trip_us
        );
        println!("probe: {}", p.compute);
        println!("probe: {}", coco::bench::grid_sync_line(&p.grid_sync));
        println!("probe: {}", coco::bench::matrix_read_line(&p.matrix_reads));
    }
    println!(
        "megakernel A/B: tg {} tok/s with, {} without (ratio {}); {}",
        ab(mk.tg(), 1),
        ab(coco::bench::median(&mk.tg_off), 1),
        ab(mk.ratio(), 3),
        mk.check
    );
    for p in [profiled, profiled_prefill] {
        match p {
            Some(Ok(p)) => print_profile(&p, r.probe.as_ref()),
            Some(Err(e)) => println!("profile: {e}"),
            None => {}
        }
    }
    Ok(())
}

/// The per-kernel table of `coco bench --profile`; with `--probe` also each kernel's rates as
/// fractions of the adapter's ceilings (read bandwidth; f32 FMA or tensor-core TFLOP/s).
fn print_profile(p: &StepProfile, probe: Option<&coco::bench::Probe>) {
    println!();
    let step = if p.tokens == 1 {
        "one decode step".to_string()
    } else {
        format!("one prefill step of {} tokens", p.tokens)
    };
    println!(
        "profile: {step} at position {}, {} dispatches, mean of {} steps (timestamp queries)",
        p.position, p.dispatches, p.steps
    );
    // Rates where the kernel counts its work (gpu::Work), "—" where it counts none.
    // Three significant digits: a software adapter's rates are thousandths of a GPU's.
    let rate = |v: Option<f64>| {
        v.map_or("—".into(), |v| {
            let digits = (2 - v.abs().max(1e-9).log10().floor() as i32).clamp(0, 9) as usize;
            format!("{v:.digits$}")
        })
    };
    let percent = |v: Option<f64>| v.map_or("—".into(), |v| format!("{:.0}%", 100.0 * v));
    let ceilings = if probe.is_some() {
        " % of read bandwidth | % of compute ceiling |"
    } else {
        ""
    };
    println!("| kernel | calls | workgroups/call | µs/step | % | GB/s | TFLOP/s |{ceilings}");
    println!(
        "|---|---|---|---|---|---|---|{}",
        if probe.is_some() { "---|---|" } else { "" }
    );
    for k in &p.kernels {
        let of = probe.map_or(String::new(), |probe| {
            let (bandwidth, compute) = k.of_ceilings(probe);
            format!(" {} | {} |", percent(bandwidth), percent(compute))
        });
        println!(
            "| {} | {} | {} | {:.1} | {:.1}% | {} | {} |{of}",
            k.label,
            k.calls,
            k.workgroups,
            k.total_us,
            100.0 * k.total_us / p.profiled_us.max(1e-9),
            rate(k.gb_per_s()),
            rate(k.tflop_per_s()),
        );
    }
    println!(
        "| total, one pass per dispatch | {} | | {:.1} | 100% | | |{}",
        p.dispatches,
        p.profiled_us,
        if probe.is_some() { " | |" } else { "" }
    );
    println!(
        "profiling gives each dispatch its own compute pass (WebGPU has only pass-level timestamps), so its total includes one pass's overhead per dispatch; the real step, one pass: {:.1} µs",
        p.one_pass_us
    );
}

/// `coco info`'s RoPE scaling: HF's rope_scaling kinds, and Phi-3's LongRoPE (held apart from
/// them, as factor tensors; it was printed as "None").
fn rope_scaling_words(c: &coco::model::Config) -> String {
    match &c.long_rope {
        Some(l) => format!(
            "LongRoPE (long factors past {} positions, attention factor {:.4})",
            l.original_context, c.rope_attn_factor
        ),
        None => format!("{:?}", c.rope_scaling),
    }
}
