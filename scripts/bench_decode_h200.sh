#!/usr/bin/env bash
# Decode A/B on the device machine (../shared/DEVICE.md): the issue's five shapes, each build
# in turn per model so both see the same GPU state. Run through the device tool with carry
# [".bench", ".gl"]:
#
#   BINS="coco-base coco coco@16x1x2x0x1" bash scripts/bench_decode_h200.sh
#
# .bench/ holds release builds (each name in BINS, shape_model, and optionally
# examples/step_timing for the host's cost per dispatch: $OUT/host.txt); `name@shape` runs that
# build with COCO_MATVEC=shape, and `name+VAR=value[+VAR=value…]` with those environment
# variables set (e.g. `coco+COCO_CHUNK=64x4+COCO_CHUNK_SPLITS=4`); .gl/ the Debian
# libvulkan1 package (the device has the NVIDIA driver but no loader). MODELS picks shapes
# (default: all five). Writes JSON lines to $OUT/decode.jsonl and prints a table last: tg128
# and the decode step's matvec µs with their read bandwidth.
#
# DEPTH=512 times pp and tg 512 tokens into the cache (`bench -d`, llama-bench's `-d`; default
# 0: tg from an empty cache, as llama-bench's tg128).
#
# PROMPTS="1 8 32 64" measures short prompts instead (issue 16's pp32 ≤ 4 decode steps):
# `bench -p P -n 16 --reps 5` per length, and a table of the prompt's ms against the decode
# step's; with PROFILE=1 also each prompt's costliest prefill kernels.
set -uo pipefail
B=.bench
M=/tmp/models
OUT=${OUT:-/tmp/out}
BINS=${BINS:-coco}
MODELS=${MODELS:-"llama-1b:q4_0 llama-1b:q8_0 gemma-270m:q5_0 qwen-0.5b:q8_0 llama-8b:q4_0"}
mkdir -p "$M" "$OUT"
source scripts/lib/device_vulkan.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
# A file an earlier run on this machine wrote is kept (shape_model is deterministic).
for spec in $MODELS; do
  [ -s "$M/${spec%%:*}-${spec##*:}.gguf" ] && continue
  "$B/shape_model" "${spec%%:*}" "${spec##*:}" "$M/${spec%%:*}-${spec##*:}.gguf" > /dev/null &
done
wait
first=${MODELS%% *}
first_bin=${BINS%% *}
first_bin=${first_bin%%[@+]*}
if ! "$B/$first_bin" -v info -m "$M/${first%%:*}-${first##*:}.gguf" 2>&1 | tee -a "$OUT/gpu.txt" | grep -E "^adapter.*(H200|H100)" > /dev/null; then
  echo "no H200 (or H100) adapter through Vulkan: see $OUT/gpu.txt" >&2
  exit 1
fi
# The ceilings the kernels are held against (a few seconds): f32 FMA, and the tensor cores
# through wgpu's cooperative matrices with and without coop128x128's workgroup loads.
"$B/$first_bin" probe --compute-only 2>>"$OUT/err.txt" | tee -a "$OUT/gpu.txt"
for spec in $MODELS; do
  m="${spec%%:*}-${spec##*:}"
  for spec_bin in $BINS; do
    bin=${spec_bin%%[@+]*}
    shape="" var=""
    case "$spec_bin" in
      *@*) shape=${spec_bin#*@} ;;
      *+*) var=${spec_bin#*+} ;;
    esac
    vars=()
    [ -n "$var" ] && IFS=+ read -ra vars <<< "$var"
    for p in ${PROMPTS:-512}; do
      echo "== $m $spec_bin${PROMPTS:+ pp$p}"
      if [ -n "${PROMPTS:-}" ]; then
        args=(-p "$p" -n 16 --reps 5 ${PROFILE:+--profile --probe})
      else
        args=(-p 512 -n 128 --reps 3 --profile --probe)
      fi
      # Only when set: builds from before depths reject -d (they time tg after the prompt).
      [ -n "${DEPTH:-}" ] && args+=(-d "$DEPTH")
      env ${shape:+COCO_MATVEC=$shape} "${vars[@]}" "$B/$bin" bench -m "$M/$m.gguf" "${args[@]}" --json 2>>"$OUT/err.txt" \
        | python3 -c "import json,sys; r=json.load(sys.stdin); r['build']='$spec_bin'; r['shape']='$m'; r['prompt']=$p; print(json.dumps(r))" \
        | tee -a "$OUT/decode.jsonl" | cut -c1-300
    done
  done
  # The host's µs per dispatch (record, encode, free) of 16-step batches, where .bench/ has
  # this tree's examples/step_timing (a few seconds a model).
  if [ -x "$B/step_timing" ] && [ -z "${PROMPTS:-}" ]; then
    echo "== $m host per dispatch" | tee -a "$OUT/host.txt"
    "$B/step_timing" "$M/$m.gguf" 16 300 2>>"$OUT/err.txt" | tee -a "$OUT/host.txt"
  fi
done
# The table: prompts in decode steps with PROMPTS, else tg128 and the decode step's kernels.
python3 - "$OUT" "${PROMPTS:+prompts}" <<'PY'
import json, sys
out, prompts = sys.argv[1], sys.argv[2] == "prompts"
if prompts:
    print("\n| shape | build | prompt | prefill ms | decode step ms | prefill in decode steps |")
    print("|---|---|---|---|---|---|")
else:
    print("\n| shape | build | depth | tg128 tok/s | pp512 tok/s | dispatches/token | decode step µs (one pass, mid-tg) | matvec µs (GB/s) | kernels (µs, GB/s) |")
    print("|---|---|---|---|---|---|---|---|---|")
for line in open(f"{out}/decode.jsonl"):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if prompts:
        pp_ms = 1000 * r["prompt"] / r["pp_tok_s"]
        step_ms = 1000 / r["tg_tok_s"]
        print(f"| {r['shape']} | {r['build']} | {r['prompt']} | {pp_ms:.2f} | {step_ms:.2f} | {pp_ms / step_ms:.1f} |")
        continue
    p = r.get("profile") or {}
    ks = p.get("kernels", []) if isinstance(p, dict) else []
    products = [k for k in ks if "matmul" in k["label"]]
    mv = sum(k["total_us"] for k in products)
    mv_bytes = sum(k.get("bytes") or 0 for k in products)
    def rate(k):  # GB/s where the kernel counts its bytes (gpu::Work)
        return f" ({k['bytes'] / (k['total_us'] * 1e3):.0f})" if k.get("bytes") else ""
    top = ", ".join(f"{k['label']} {k['total_us']:.0f}{rate(k)}" for k in ks[:6])
    print(f"| {r['shape']} | {r['build']} | {r.get('depth', 'after pp')} | {r['tg_tok_s']:.1f} | {r['pp_tok_s']:.0f} | {r['dispatches_per_token']} | "
          f"{p.get('one_pass_us', 0):.0f} | {mv:.0f} ({mv_bytes / max(mv, 1e-9) / 1e3:.0f}) | {top} |")
PY
# With PROMPTS and PROFILE=1: each prompt's costliest prefill kernels (µs over the step).
if [ -n "${PROMPTS:-}" ] && [ -n "${PROFILE:-}" ]; then
  python3 - "$OUT" <<'PY'
import json, sys
print("\n| shape | build | prompt | profiled µs | costliest prefill kernels (calls × µs in all; TFLOP/s, workgroups per call) |")
print("|---|---|---|---|---|")
for line in open(f"{sys.argv[1]}/decode.jsonl"):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    prof = r.get("prefill_profile") or {}
    ks = sorted(prof.get("kernels", []), key=lambda k: -k["total_us"])[:6]
    def rate(k):  # TFLOP/s where the kernel counts its operations (gpu::Work); its grid
        tf = f"{k['flops'] / (k['total_us'] * 1e6):.1f} TFLOP/s, " if k.get("flops") else ""
        return f" ({tf}{k.get('workgroups', '?')} wg)"
    top = ", ".join(f"{k['label']} {k['calls']}× {k['total_us']:.0f}{rate(k)}" for k in ks)
    print(f"| {r['shape']} | {r['build']} | {r['prompt']} | {prof.get('profiled_us', 0):.0f} | {top} |")
PY
fi
