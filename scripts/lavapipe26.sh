#!/usr/bin/env bash
# Runs a command with Mesa 26's lavapipe (Debian sid, set up once in .cache/lavapipe26 by
# scripts/lib/install.sh coco_lavapipe26), where coco's tensor-core tiles run on the CPU with
# 8 × 8 × 8 cooperative matrices: test binaries run through sid's ld.so as cargo's runner.
#
#   bash scripts/lavapipe26.sh cargo test --release --test kernels_matmul _q4_0
#   COCO_COOP_VEC_STAGE=0 bash scripts/lavapipe26.sh cargo test --release --test kernels_matmul_fused
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/install.sh
source scripts/lib/install.sh
# The set-up checks coco's report on a fixture (scripts/fixtures.sh writes them).
[ -f tests/fixtures/llama-spm-q8_0.gguf ] || bash scripts/fixtures.sh >&2
coco_lavapipe26 >&2
# shellcheck disable=SC1091
source .cache/lavapipe26/env
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d)}
exec "$@"
