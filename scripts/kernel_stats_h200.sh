#!/usr/bin/env bash
# The driver's compile statistics for every kernel a run compiles (registers per thread, shared
# memory, stack, and the workgroups an SM holds: examples/pipeline_stats.rs), on the device
# machine. Carry
# [".bench", ".gl"]; .bench/ holds coco, shape_model and pipeline_stats (release builds).
#
#   MODELS="llama-1b:q4_0" PROMPTS="32 64 512" bash scripts/kernel_stats_h200.sh
#
# Each model runs `coco bench -p P -n 4` per prompt length and setting with COCO_DUMP_WGSL
# (SETTINGS; by default natively and with COCO_COOPMAT=0, the portable kernels);
# $OUT/stats.txt has one line per kernel.
set -uo pipefail
B=.bench
M=/tmp/models
OUT=${OUT:-/tmp/out}
MODELS=${MODELS:-"llama-1b:q4_0"}
PROMPTS=${PROMPTS:-"32 64 512"}
# The settings each prompt runs under: "default" or VAR=value[+VAR=value…].
SETTINGS=${SETTINGS:-"default COCO_COOPMAT=0"}
mkdir -p "$M" "$OUT"
source scripts/lib/device_vulkan.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
W=/tmp/wgsl
rm -rf "$W"
for spec in $MODELS; do
  m="$M/${spec%%:*}-${spec##*:}.gguf"
  [ -s "$m" ] || "$B/shape_model" "${spec%%:*}" "${spec##*:}" "$m" > /dev/null
  for p in $PROMPTS; do
    for setting in $SETTINGS; do
      vars=()
      [ "$setting" != default ] && IFS=+ read -ra vars <<< "$setting"
      env "${vars[@]}" COCO_DUMP_WGSL=$W "$B/coco" bench -m "$m" -p "$p" -n 4 --reps 1 > /dev/null 2>> "$OUT/err.txt"
    done
  done
done
echo "$(ls "$W" | wc -l) kernels" | tee -a "$OUT/gpu.txt"
"$B/pipeline_stats" "$W" > "$OUT/stats.txt" 2>> "$OUT/err.txt"
"$B/pipeline_stats" "$W" matmul --no-zero-init > "$OUT/stats_no_zero_init.txt" 2>> "$OUT/err.txt"
first=$(ls "$W" | grep coop128 | head -1)
[ -n "$first" ] && "$B/pipeline_stats" "$W" "${first%.wgsl}" --ir > "$OUT/ir.txt" 2>> "$OUT/err.txt"
tar -C /tmp -cJf "$OUT/wgsl.tar.xz" wgsl
head -c 6000 "$OUT/stats.txt"
