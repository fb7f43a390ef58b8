#!/usr/bin/env bash
# The page on a real GPU: coco's page in headless Chromium on the H200 (WebGPU through Dawn on
# NVIDIA's Vulkan driver), next to native `coco bench` on the same file in the same session.
# A benchmark, not a CI test (CI has no GPU).
#
#   bash scripts/bench_browser_h200.sh
#
# packs everything into .carry-browser/ (git-ignored; scripts/browser_h200/prepare.sh) and
# prints the device calls that carry it, 64 MiB at most each. Issue them back to back: the
# machine is given back 30 s after a call, and what earlier calls unpacked is kept only while
# it stays warm. The last call measures (scripts/browser_h200/device.sh bench):
#   - the in-page benchmark (pp/tg, 3 reps) with a greedy generation, and a generation with the
#     page's default sampler settings (128 tokens), each in a fresh browser, 2 runs, for the
#     default (subgroups where the browser grants them) and subgroups=0 (workgroup reductions);
#   - long main-thread tasks (PerformanceObserver), a screenshot;
#   - wllama (newest on npm) on the same file in the same browser: its greedy completions
#     (128-token prompt, 128 tokens), and which backend it really used (llama.cpp's log);
#   - native `coco bench` on the same GGUF, default and COCO_SUBGROUPS=0.
# Results come back under the device tool's files: page.jsonl, page-summary.json, page.png,
# native.jsonl, logs.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/browser_h200/prepare.sh
S=scripts/browser_h200/device.sh
cat <<CALLS

Device calls (run tool, from the repository root):
  1 carry [".carry-browser/gl", ".carry-browser/chrA.tar.xz"]                          bash $S
  2 carry [".carry-browser/chrB.tar.xz", ".carry-browser/model/part0"]                 bash $S
  3 carry [".carry-browser/libs.tar.xz", ".carry-browser/model/part1"]                 bash $S
  4 carry [".carry-browser/model/part2", ".carry-browser/dist.tar.xz"]               bash $S
  5 carry [".carry-browser/model/part3", ".carry-browser/wllama.tar.xz"]             bash $S
  6 carry [".carry-browser/model/part4", ".carry-browser/model/SHA256", ".carry-browser/coco"]  bash $S bench
CALLS
