#!/usr/bin/env bash
# The GPU-sampling measurements on the device machine (../shared/DEVICE.md): what a user's
# default run decodes at against greedy, on the same decode loop, and what the sampler costs
# stage by stage. Run through the device tool with carry [".bench", ".gl"]:
#
#   bash scripts/bench_sampling_h200.sh
#
# .bench/ holds release builds of coco and the examples shape_model and sampler_timing;
# .gl/ the Debian libvulkan1 package (the device has the NVIDIA driver but no loader).
# Writes logs and JSON lines to $OUT; prints a short table last.
set -uo pipefail
B=.bench
M=/tmp/models
OUT=${OUT:-/tmp/out}
mkdir -p "$M" "$OUT"
source scripts/lib/device_vulkan.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
"$B/shape_model" gemma-270m q5_0 "$M/gemma-270m-shape-q5_0.gguf" > /dev/null &
"$B/shape_model" llama-1b q4_0 "$M/llama1b-q4_0.gguf" > /dev/null &
wait
if ! "$B/coco" -v info -m "$M/gemma-270m-shape-q5_0.gguf" 2>&1 | tee -a "$OUT/gpu.txt" | grep -E "^adapter.*(H200|H100)" > /dev/null; then
  echo "no H200 (or H100) adapter through Vulkan: see $OUT/gpu.txt" >&2
  exit 1
fi
echo "== sampler stages"
for n in 262144 128256; do "$B/sampler_timing" "$n"; done 2>&1 | tee "$OUT/sampler_timing.txt"
for m in gemma-270m-shape-q5_0 llama1b-q4_0; do
  echo "== bench $m"
  "$B/coco" bench -m "$M/$m.gguf" -p 512 -n 128 --reps 3 --json | tee -a "$OUT/bench.jsonl"
  echo "== bench $m --cpu-sampling"
  "$B/coco" bench -m "$M/$m.gguf" -p 512 -n 128 --reps 3 --cpu-sampling --json | tee -a "$OUT/bench.jsonl"
done
# The issue's table: `coco run -v`, a ~220-token prompt, 256 new tokens, twice each.
prompt=$(printf 'The history of the river valley is a long one, told in stones and songs. %.0s' $(seq 15))
for settings in "" "--temp 0" "--temp 0 --repeat-penalty 1" "--cpu-sampling" "--temp 0 --cpu-sampling"; do
  for rep in 1 2; do
    # shellcheck disable=SC2086
    line=$("$B/coco" -v run -m "$M/gemma-270m-shape-q5_0.gguf" -p "$prompt" -n 256 $settings --json 2>>"$OUT/run_err.txt" \
      | python3 -c 'import json,sys; s=json.load(sys.stdin)["stats"]; print(json.dumps(s))')
    echo "{\"settings\": \"${settings:-defaults}\", \"rep\": $rep, \"stats\": $line}" | tee -a "$OUT/run.jsonl"
  done
done
python3 - "$OUT" <<'EOF'
import json, sys
out = sys.argv[1]
print("\n| model | sampler on | tg128 greedy | tg128 default sampler | ratio | dispatches greedy / sampled | CPU sampler ms |")
print("|---|---|---|---|---|---|---|")
for line in open(f"{out}/bench.jsonl"):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    print(f"| {r['model']} | {'GPU' if r['sampler_on_gpu'] else 'CPU'} | {r['tg_tok_s']:.1f} | {r['tg_sampled_tok_s']:.1f} | "
          f"{r['sampled_vs_greedy']:.3f} | {r['dispatches_per_token']} / {r['sampled_dispatches_per_token']} | {r['cpu_sampler_ms']:.2f} |")
print("\n| coco run settings | rep | decode tok/s | ms/token | prefill tok/s | steps/submit | sampler |")
print("|---|---|---|---|---|---|---|")
for line in open(f"{out}/run.jsonl"):
    r = json.loads(line)
    s = r["stats"]
    print(f"| {r['settings']} | {r['rep']} | {s['decode_tok_s']:.1f} | {s['ms_per_token']:.2f} | {s['prefill_tok_s']:.0f} | {s['steps_per_submit']} | {'GPU' if s['sampler_on_gpu'] else 'CPU'} |")
EOF
