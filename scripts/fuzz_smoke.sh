#!/usr/bin/env bash
# Bounded libFuzzer run of every cargo-fuzz target in fuzz/ (hostile files and text must never crash the parser or tokenizers).
# Exits non-zero on a crash, a panic, a timeout or an allocation over the limit; the input that
# did it is saved under fuzz/artifacts/<target>/ (replay: `cargo fuzz run <target> <file>`).
#
#   bash scripts/fuzz_smoke.sh          # 45 s per target
#   FUZZ_SECONDS=600 bash scripts/fuzz_smoke.sh
#   bash scripts/fuzz_smoke.sh --build-only   # install cargo-fuzz if missing and build; run
#                                             # nothing (scripts/test.sh does this in the
#                                             # background, then runs the smoke at the end)
#
# Toolchain: cargo-fuzz passes nightly-only rustc flags (-Zsanitizer=address, sancov passes).
# RUSTC_BOOTSTRAP=1 lets the stable toolchain accept them, so no nightly is needed.
# The build is cargo-fuzz's default: optimized, with debug assertions and overflow checks (an
# integer overflow is a crash here), and AddressSanitizer (its malloc hooks make
# -malloc_limit_mb work).
#
# Limits, per input: no single allocation of 64 MB or more (-malloc_limit_mb), 10 s at most
# (-timeout). -rss_limit_mb bounds the whole process, which also holds the tokenizer
# vocabularies and ASan's shadow memory and quarantine, so it is set per target above that.
# The 64 MB peak for a parse is asserted by tests/malformed.rs under a counting allocator.
#
# Corpora: new inputs go to fuzz/work/<target>/ (git-ignored); the committed seeds in
# fuzz/corpus/<target>/ are only read. Regenerate the seeds with
#   cargo test --release --test malformed -- --ignored write_fuzz_seed_corpus
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-45}
build_only=0
[ "${1:-}" = --build-only ] && build_only=1
export RUSTC_BOOTSTRAP=1
# Small ASan quarantine: freed memory is recycled sooner, so RSS reflects live memory.
export ASAN_OPTIONS=${ASAN_OPTIONS:-quarantine_size_mb=16:detect_leaks=0}

# Pinned like the other tools (scripts/lib/install.sh); built without LTO and at opt-level 1
# (a tool that mostly waits on cargo gains nothing from a slow optimized build).
CARGO_FUZZ_VERSION=0.13.2
if ! cargo fuzz --version 2>/dev/null | grep -qw "$CARGO_FUZZ_VERSION"; then
  echo "cargo-fuzz: installing $CARGO_FUZZ_VERSION"
  CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
    cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi

[ -f tests/fixtures/vocab-llama3.gguf ] \
  || echo "note: tests/fixtures/vocab-*.gguf missing (scripts/fixtures.sh); the tokenizer target uses its built-in vocabularies only"

cd fuzz
start=$(date +%s)
cargo fuzz build
echo "fuzz build: $(( $(date +%s) - start )) s"
[ "$build_only" = 1 ] && exit 0

# The targets run side by side: libFuzzer runs one input at a time on one core, and CI has
# two, so the smoke takes one target's time, each target still getting its full FUZZ_SECONDS
# of a core.
# target  rss_limit_mb  max_len
targets=(
  "gguf_chunks 512 16384"
  "tokenizer 2048 4096"
)
pids=()
for spec in "${targets[@]}"; do
  read -r target rss max_len <<<"$spec"
  mkdir -p "work/$target" "corpus/$target"
  echo "== $target: ${seconds} s"
  log="work/$target.log"
  # -print_final_stats: "stat::number_of_executed_units" gives the run's size.
  cargo fuzz run "$target" "work/$target" "corpus/$target" -- \
    -max_total_time="$seconds" -malloc_limit_mb=64 -rss_limit_mb="$rss" -timeout=10 \
    -max_len="$max_len" -print_final_stats=1 >"$log" 2>&1 &
  pids+=($!)
done
summary=()
failed=0
for i in "${!targets[@]}"; do
  read -r target _ <<<"${targets[$i]}"
  log="work/$target.log"
  set +e
  wait "${pids[$i]}"
  status=$?
  set -e
  echo "== $target"
  grep -E '^(stat::|Done |INFO: seed corpus)|vocabularies' "$log" || true
  if [ "$status" -ne 0 ]; then
    tail -n 60 "$log" >&2
    echo "fuzz_smoke: $target FAILED (exit $status); full log fuzz/$log, reproducer in fuzz/artifacts/$target/" >&2
    [ "$failed" = 0 ] && failed=$status
    continue
  fi
  execs=$(awk '/^stat::number_of_executed_units:/ { print $2 }' "$log")
  # A run that executed nothing (a harness that exits at once, a missing corpus) is no smoke.
  if [ -z "$execs" ] || [ "$execs" -eq 0 ]; then
    tail -n 30 "$log" >&2
    echo "fuzz_smoke: $target executed no inputs (full log fuzz/$log)" >&2
    [ "$failed" = 0 ] && failed=1
    continue
  fi
  summary+=("$target: $execs executions in ${seconds} s")
done
[ "$failed" = 0 ] || exit "$failed"
echo "fuzz_smoke: no crash, hang or allocation over 64 MB ($(( $(date +%s) - start )) s in all):"
printf '  %s\n' "${summary[@]}"
