#!/usr/bin/env bash
# The page, in one command: installs what is missing (trunk, wasm-bindgen-cli at the lock
# file's version, binaryen 132's wasm-opt, the wasm32 target, the default model), builds the
# page with trunk and serves it at http://127.0.0.1:8080 with the default model at /models/.
#
#   bash scripts/serve.sh [serve.mjs options, e.g. --port 9000]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=lib/install.sh
source scripts/lib/install.sh

coco_apt unzip:unzip
coco_wasm_target
coco_install_web_tools
coco_npm
coco_model
coco_build_page
exec node scripts/serve.mjs "$@"
