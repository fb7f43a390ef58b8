#!/usr/bin/env bash
# coco beside llama.cpp (Vulkan and CUDA) with `DEPTH` tokens already in the cache (default
# 512): `coco bench -d` and `llama-bench -d`, pp512 and tg128 each after the depth's tokens.
#
# The peer harness (../shared/peers/h200/run.sh, copied to .peers-h200/ with its carry
# .carry-native/ prepared as its README says, coco and shape_model from this tree) measures
# at depth 0, the default of both tools. This script runs after it, on the same warm machine:
# it reuses the harness's llama.cpp builds, models and Vulkan setup under /tmp/peer. Carry
# [".carry-native", ".peers-h200"]:
#
#   timeout 575 bash .peers-h200/run.sh pipeline > /tmp/pipeline.fg 2>&1; bash .peers-h200/run.sh collect
#   bash scripts/peers_depth_h200.sh          # the next call, while the machine is warm
#
# Writes $OUT/depth.jsonl (coco's records and llama-bench's, one per line) and prints a table.
set -uo pipefail
W=${WORK:-/tmp/peer}
M=$W/models
OUT=${OUT:-/tmp/out}
DEPTH=${DEPTH:-512}
MODELS=${MODELS:-"llama1b-q4_0 llama1b-q8_0 gemma270m-q5_0 qwen0.5b-q8_0 llama8b-q4_0"}
mkdir -p "$OUT"
if [ ! -f "$W/vkenv.sh" ] || [ ! -x "$W/bvulkan/bin/llama-bench" ] || [ ! -x "$W/bcuda/bin/llama-bench" ]; then
  echo "no harness builds in $W: run .peers-h200/run.sh pipeline on this machine first" >&2
  exit 1
fi
. "$W/vkenv.sh"
export WGPU_BACKEND=vulkan
: > "$OUT/depth.jsonl"
for m in $MODELS; do
  f=$M/$m.gguf
  [ -s "$f" ] || { echo "missing $f" >&2; continue; }
  echo "== $m coco -d $DEPTH $(date +%T)"
  "$W/bin/coco" bench -m "$f" -p 512 -n 128 -d "$DEPTH" --reps 3 --json 2>> "$OUT/depth_err.txt" \
    | python3 -c "import json,sys; r=json.load(sys.stdin); r['engine']='coco'; r['shape']='$m'; print(json.dumps(r))" \
    >> "$OUT/depth.jsonl"
  for b in vulkan cuda; do
    echo "== $m llama.cpp $b -d $DEPTH $(date +%T)"
    "$W/b$b/bin/llama-bench" -m "$f" -p 512 -n 128 -d "$DEPTH" -ngl 99 -r 3 -fa 0,1 -o jsonl 2>> "$OUT/depth_err.txt" \
      | python3 -c "
import json, sys
for line in sys.stdin:
    r = json.loads(line); r['engine'] = 'llama.cpp $b'; r['shape'] = '$m'; print(json.dumps(r))" \
      >> "$OUT/depth.jsonl"
  done
done
python3 - "$OUT/depth.jsonl" "$DEPTH" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    key = (r["shape"], r["engine"])
    cell = rows.setdefault(key, {"pp": 0.0, "tg": 0.0})
    if r["engine"] == "coco":
        cell["pp"], cell["tg"] = r.get("pp_tok_s") or 0.0, r.get("tg_tok_s") or 0.0
    elif r.get("n_prompt", 0) > 0:  # best of flash attention off / on, as DEVICE.md's table
        cell["pp"] = max(cell["pp"], r["avg_ts"])
    else:
        cell["tg"] = max(cell["tg"], r["avg_ts"])
d = sys.argv[2]
print(f"\n| shape | engine | pp512 @ d{d} tok/s | tg128 @ d{d} tok/s |")
print("|---|---|---|---|")
for (shape, engine), c in rows.items():
    print(f"| {shape} | {engine} | {c['pp']:.0f} | {c['tg']:.1f} |")
PY
