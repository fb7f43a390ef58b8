#!/usr/bin/env bash
# Tensor-core changes checked and timed in one device call (../shared/DEVICE.md): for each A/B
# setting, the kernel tests' tensor-core cases, a greedy run and teacher-forced logits of the
# Llama-1B shape against the default build's, then prompts with the per-kernel profile. Run
# through the device tool with carry [".bench", ".gl"]:
#
#   ABS="COCO_COOP_PRESTAGE=1 COCO_COOP_PRESTAGE=1+COCO_COOP_SUBGROUP_TILE=64" \
#     bash scripts/coop_check_h200.sh
#   ABS="COCO_COOP_VEC_STAGE=1 COCO_COOP_PRESTAGE=1+COCO_COOP_VEC_STAGE=1" bash scripts/coop_check_h200.sh
#
# .bench/ holds the release `coco`, `shape_model` and any of the `kernels_matmul`,
# `kernels_matmul_fused` and `kernels_attention` test binaries (cargo test --release --no-run;
# stripped, they fit the carry); .gl/ the Debian libvulkan1 package. ABS lists the settings, each VAR=value[+VAR=value…];
# PROMPTS and MODELS go to bench_decode_h200.sh (default "128 512", the Llama-1B and -8B Q4_0
# shapes; 64-token steps run the 64 × 64 tiles); SKIP_TESTS=1 skips the kernel tests (~35 s
# per setting on the H200). Two settings with both models take ~8 of the call's 10 minutes.
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
ABS=${ABS:?set ABS to the settings under test, e.g. ABS=COCO_COOP_PRESTAGE=1}
source scripts/lib/device_vulkan.sh
M=/tmp/models; mkdir -p $M
[ -s $M/llama-1b-q4_0.gguf ] || .bench/shape_model llama-1b q4_0 $M/llama-1b-q4_0.gguf > /dev/null &
if [ -z "${SKIP_TESTS:-}" ]; then
  for ab in $ABS; do
    IFS=+ read -ra vars <<< "$ab"
    # The suites carried: the products' tensor-core cases, and attention (~3 s).
    suites=("kernels_matmul matmul_" "kernels_matmul_fused fused_" "kernels_attention attention")
    for suite in "${suites[@]}"; do
      set -- $suite
      [ -x ".bench/$1" ] || continue
      env "${vars[@]}" COCO_TEST_VARIANTS=coop timeout 240 .bench/$1 $2 --nocapture > "$OUT/$1.$ab.txt" 2>&1
      echo "$1 ($ab, tensor-core cases) rc=$?"
      grep "test result\|FAIL\|panick" "$OUT/$1.$ab.txt" | head -20
    done
  done
fi
wait
# A 3 × 95-character prompt: the shape model's tokenizer gives ~300 tokens, so the greedy run's
# prompt is one step of 128-token tiles and the logits' are 64-token steps.
P=$(python3 -c "print(' '.join(['The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat by the door.'] * 3))")
for ab in base $ABS; do
  vars=()
  [ "$ab" != base ] && IFS=+ read -ra vars <<< "$ab"
  env "${vars[@]}" .bench/coco run -m $M/llama-1b-q4_0.gguf --ctx 4096 -p "$P" -n 24 --temp 0 --json > "$OUT/run.$ab.json" 2>>"$OUT/err.txt"
  env "${vars[@]}" .bench/coco logits -m $M/llama-1b-q4_0.gguf --ctx 4096 -p "$P" --top 5 --json > "$OUT/logits.$ab.json" 2>>"$OUT/err.txt"
done
python3 - "$OUT" $ABS <<'PY'
import json, sys
out, abs_ = sys.argv[1], sys.argv[2:]
base_run = json.load(open(f"{out}/run.base.json"))
base = json.load(open(f"{out}/logits.base.json"))
for ab in abs_:
    try:
        run = json.load(open(f"{out}/run.{ab}.json"))
        lg = json.load(open(f"{out}/logits.{ab}.json"))
    except (OSError, ValueError) as e:
        print(f"{ab}: no result ({e}); see err.txt")
        continue
    print(f"{ab}: greedy ({len(run['prompt_ids'])}-token prompt, 24 tokens) the same ids: {run['ids'] == base_run['ids']}")
    worst, top1 = 0.0, 0
    for pa, pb in zip(base["positions"], lg["positions"]):
        da, db = dict(pa["top"]), dict(pb["top"])
        top1 += pa["top"][0][0] == pb["top"][0][0]
        for k in set(da) & set(db):
            worst = max(worst, abs(da[k] - db[k]))
    print(f"{ab}: logits in 64-token steps, {len(lg['positions'])} positions, top-1 equal {top1}, max |dlogit| {worst:.3g}")
PY
BINS="coco"
for ab in $ABS; do BINS="$BINS coco+$ab"; done
PROMPTS=${PROMPTS:-"128 512"} PROFILE=1 BINS="$BINS" MODELS=${MODELS:-"llama-1b:q4_0 llama-8b:q4_0"} \
  bash scripts/bench_decode_h200.sh 2>&1 | grep "^|"
