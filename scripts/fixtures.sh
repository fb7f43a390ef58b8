#!/usr/bin/env bash
# Regenerates the test fixtures (seeded, byte-identical; skipped when already right).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p tests/fixtures
for kind in mistral-spm llama3 qwen2 gpt4o smollm; do
  [ -f "tests/fixtures/vocab-$kind.gguf" ] || python3 tools/vocab.py "tests/fixtures/vocab-$kind.gguf" "$kind"
done
python3 tools/make_fixtures.py --out tests/fixtures
