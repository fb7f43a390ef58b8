#!/usr/bin/env bash
# A tensor-core change checked and timed in one device call (../shared/DEVICE.md): the kernel
# tests' tensor-core cases, a greedy run and teacher-forced logits of the Llama-1B shape with
# and without the A/B switch, then prompts with the per-kernel profile. Run through the device
# tool with carry [".bench", ".gl"]:
#
#   AB=COCO_COOP_PRESTAGE=1 bash scripts/coop_check_h200.sh
#
# .bench/ holds the release `coco`, `shape_model` and the `kernels_matmul` and
# `kernels_matmul_fused` test binaries (cargo test --release --no-run; stripped, they fit the
# carry); .gl/ the Debian libvulkan1 package. AB is the switch (VAR=value) the second build
# runs with; PROMPTS and MODELS go to bench_decode_h200.sh (default "64 128 512", the Llama-1B
# and -8B Q4_0 shapes); SKIP_TESTS=1 skips the kernel tests (~60 s on the H200).
set -uo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
AB=${AB:?set AB to the switch under test, e.g. AB=COCO_COOP_PRESTAGE=1}
for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
export XDG_RUNTIME_DIR=$(mktemp -d) WGPU_BACKEND=vulkan
printf '{"file_format_version":"1.0.1","ICD":{"library_path":"libEGL_nvidia.so.0","api_version":"1.4.312"}}\n' > /tmp/nvidia_egl_icd.json
export VK_DRIVER_FILES=/tmp/nvidia_egl_icd.json VK_ICD_FILENAMES=/tmp/nvidia_egl_icd.json
M=/tmp/models; mkdir -p $M
.bench/shape_model llama-1b q4_0 $M/llama-1b-q4_0.gguf > /dev/null &
if [ -z "${SKIP_TESTS:-}" ]; then
  for suite in "kernels_matmul matmul_" "kernels_matmul_fused fused_"; do
    set -- $suite
    env "$AB" COCO_TEST_VARIANTS=coop timeout 240 .bench/$1 $2 --nocapture > "$OUT/$1.txt" 2>&1
    echo "$1 ($AB, tensor-core cases) rc=$?"
    grep "test result\|FAIL\|panick" "$OUT/$1.txt" | head -20
  done
fi
wait
# A 3 × 95-character prompt: the shape model's tokenizer gives ~300 tokens, so the greedy run's
# prompt is one 128-token-tile step and the logits' are 64-token steps.
P=$(python3 -c "print(' '.join(['The quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat by the door.'] * 3))")
for side in base ab; do
  vars=()
  [ "$side" = ab ] && vars=("$AB")
  env "${vars[@]}" .bench/coco run -m $M/llama-1b-q4_0.gguf --ctx 4096 -p "$P" -n 24 --temp 0 --json > "$OUT/run_$side.json" 2>>"$OUT/err.txt"
  env "${vars[@]}" .bench/coco logits -m $M/llama-1b-q4_0.gguf --ctx 4096 -p "$P" --top 5 --json > "$OUT/logits_$side.json" 2>>"$OUT/err.txt"
done
python3 - "$OUT" "$AB" <<'PY'
import json, sys
out, ab = sys.argv[1], sys.argv[2]
r = [json.load(open(f"{out}/run_{s}.json")) for s in ("base", "ab")]
print(f"greedy ({len(r[0]['prompt_ids'])}-token prompt, 24 tokens): the same ids with {ab}:", r[0]["ids"] == r[1]["ids"])
a, b = (json.load(open(f"{out}/logits_{s}.json")) for s in ("base", "ab"))
worst, top1 = 0.0, 0
for pa, pb in zip(a["positions"], b["positions"]):
    da, db = dict(pa["top"]), dict(pb["top"])
    top1 += pa["top"][0][0] == pb["top"][0][0]
    for k in set(da) & set(db):
        worst = max(worst, abs(da[k] - db[k]))
print(f"logits, 64-token steps: {len(a['positions'])} positions, top-1 equal {top1}, max |dlogit| {worst:.3g}")
PY
PROMPTS=${PROMPTS:-"64 128 512"} PROFILE=1 BINS="coco coco+$AB" MODELS=${MODELS:-"llama-1b:q4_0 llama-8b:q4_0"} \
  bash scripts/bench_decode_h200.sh 2>&1 | grep "^|"
