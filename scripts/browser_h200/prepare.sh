#!/usr/bin/env bash
# Dev box (Debian 12, apt reachable): packs everything the H200 browser benchmark carries into
# .carry-browser/ (git-ignored), in pieces that fit the device tool's 64 MiB per call:
#   gl/          glvnd + the Vulkan loader (NVIDIA's ICD needs all of glvnd, not only libvulkan1)
#   chrA.tar.xz  Debian 12's chromium-headless-shell binary (xz with the x86 filter: ~54 MB)
#   chrB.tar.xz  the rest of /usr/lib/chromium it reads (V8 snapshots, paks, ICU, SwiftShader)
#   libs.tar.xz  the Debian 12 libraries the device image lacks
#   dist.tar.xz  the built page (dist/)
#   coco         the native CLI, for `coco bench` on the same file in the same session
#   wllama.tar.xz  wllama (npm, newest by default) for the side-by-side run
#   model/partN  the page's default model (models/gemma-3-270m-q4_k_m.gguf) in 5 pieces + SHA256
# Each piece is skipped when present; delete it to redo (the page and coco are always redone).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CB=$ROOT/.carry-browser
W=${W:-/tmp/coco-browser-prep}
mkdir -p "$CB/gl" "$CB/model" "$W/debs"
grep -qx '/.carry-browser/' "$ROOT/.git/info/exclude" 2>/dev/null || echo '/.carry-browser/' >> "$ROOT/.git/info/exclude"

if [ -z "$(ls "$CB"/gl/libglx0_*.deb 2>/dev/null)" ]; then
  (cd "$CB/gl" && apt-get download libvulkan1 libglvnd0 libegl1 libgl1 libglx0 libopengl0 libgles2)
fi

# The headless shell's shared libraries that the device image (Ubuntu 24.04) has no soname
# for, found with ldd there; the device copies only those still missing.
PKGS="chromium-headless-shell chromium-common libasound2 libatk1.0-0 libatspi2.0-0 libdav1d6 libdbus-1-3
 libdouble-conversion3 libflac12 libfontconfig1 libfreetype6 libgbm1 libglib2.0-0 libharfbuzz-subset0
 libharfbuzz0b libjpeg62-turbo liblcms2-2 libminizip1 libnspr4 libnss3 libopenh264-7 libopenjp2-7 libopus0
 libpulse0 libxcomposite1 libxdamage1 libxfixes3 libxkbcommon0 libxnvctrl0 libxrandr2 libxrender1
 libgraphite2-3 libsndfile1 libasyncns0 libvorbis0a libvorbisenc2 libmpg123-0 libmp3lame0 libogg0
 libwayland-server0 libxi6 libx11-xcb1 libxtst6 libxcb-randr0 fontconfig-config fonts-dejavu-core"
if [ -z "$(ls "$W"/debs/chromium-headless-shell_*.deb 2>/dev/null)" ]; then
  (cd "$W/debs" && apt-get download $PKGS)
fi
if [ ! -f "$CB/chrA.tar.xz" ] || [ ! -f "$CB/chrB.tar.xz" ] || [ ! -f "$CB/libs.tar.xz" ]; then
  rm -rf "$W/x" "$W/chromium" "$W/libs"
  mkdir -p "$W/x" "$W/chromium" "$W/libs/usr/lib/x86_64-linux-gnu" "$W/libs/etc" "$W/libs/usr/share"
  for f in "$W"/debs/*.deb; do
    case $(basename "$f") in chromium-*) dpkg -x "$f" "$W/x" ;; *) dpkg -x "$f" "$W/x/libs" ;; esac
  done
  (cd "$W/x/usr/lib/chromium" && cp -a chromium-headless-shell headless_*.pak icudtl.dat libEGL.so \
    libGLESv2.so libvulkan.so.1 libvk_swiftshader.so vk_swiftshader_icd.json snapshot_blob.bin \
    v8_context_snapshot.bin locales "$W/chromium/")
  [ -f "$CB/chrA.tar.xz" ] || tar -C "$W" -cf - chromium/chromium-headless-shell | xz -9 --x86 --lzma2=preset=9 -T2 > "$CB/chrA.tar.xz"
  [ -f "$CB/chrB.tar.xz" ] || tar -C "$W" -cf - --exclude=chromium/chromium-headless-shell chromium | xz -9 -T2 > "$CB/chrB.tar.xz"
  # The sonames the device image lacks (ldd of the headless shell there, 2026-12-01, and what
  # those need in turn), flattened into one directory, and the fonts.
  for n in libFLAC.so.12 libXNVCtrl.so.0 libXcomposite.so.1 libXdamage.so.1 libXfixes.so.3 libXrandr.so.2 \
    libXrender.so.1 libasound.so.2 libasyncns.so.0 libatk-1.0.so.0 libatspi.so.0 libdav1d.so.6 libdbus-1.so.3 \
    libdouble-conversion.so.3 libfontconfig.so.1 libfreebl3.so libfreeblpriv3.so libfreetype.so.6 libgbm.so.1 \
    libgio-2.0.so.0 libglib-2.0.so.0 libgmodule-2.0.so.0 libgobject-2.0.so.0 libgraphite2.so.3 \
    libgthread-2.0.so.0 libharfbuzz-subset.so.0 libharfbuzz.so.0 libjpeg.so.62 liblcms2.so.2 libminizip.so.1 \
    libmp3lame.so.0 libmpg123.so.0 libnspr4.so libnss3.so libnssckbi.so libnssdbm3.so libnssutil3.so libogg.so.0 \
    libopenh264.so.7 libopenjp2.so.7 libopus.so.0 libplc4.so libplds4.so libpulse-simple.so.0 libpulse.so.0 \
    libpulsecommon-16.1.so libsmime3.so libsndfile.so.1 libsoftokn3.so libssl3.so libvorbis.so.0 \
    libvorbisenc.so.2 libwayland-server.so.0 libxkbcommon.so.0 libXi.so.6 libX11-xcb.so.1 libXtst.so.6 \
    libxcb-randr.so.0; do
    f=$(find "$W/x/libs" -name "$n" | head -1)
    if [ -n "$f" ]; then cp -L "$f" "$W/libs/usr/lib/x86_64-linux-gnu/"; else echo "warning: no $n" >&2; fi
  done
  cp -a "$W/x/libs/etc/fonts" "$W/libs/etc/"
  cp -a "$W/x/libs/usr/share/fonts" "$W/x/libs/usr/share/fontconfig" "$W/libs/usr/share/"
  tar -cJf "$CB/libs.tar.xz" -C "$W/libs" .
fi

# wllama, newest on npm, for the side-by-side run (only esm/ is served).
WLLAMA=${WLLAMA:-3.13.0}
if [ ! -f "$CB/wllama-$WLLAMA.tar.xz" ]; then
  rm -rf "$W/wllama" && mkdir -p "$W/wllama"
  (cd "$W/wllama" && npm pack "@wllama/wllama@$WLLAMA" >/dev/null && tar xzf wllama-wllama-$WLLAMA.tgz)
  tar -cJf "$CB/wllama-$WLLAMA.tar.xz" -C "$W/wllama/package" esm package.json
  cp "$CB/wllama-$WLLAMA.tar.xz" "$CB/wllama.tar.xz"
fi

# The page and the native CLI of this checkout.
(cd "$ROOT" && source scripts/lib/install.sh && coco_build_page >/dev/null)
tar -cJf "$CB/dist.tar.xz" -C "$ROOT" --transform 's|^dist|cocodist|' dist
(cd "$ROOT" && cargo build --release --bin coco -q)
strip -o "$CB/coco" "$ROOT/target/release/coco"  # stripped: call 6 is at the 64 MiB edge

MODEL=$ROOT/models/gemma-3-270m-q4_k_m.gguf
if [ ! -f "$CB/model/SHA256" ]; then
  [ -f "$MODEL" ] || { echo "no $MODEL: bash scripts/install_model.sh" >&2; exit 1; }
  (cd "$CB/model" && split -n 5 -d -a 1 "$MODEL" part && sha256sum "$MODEL" | cut -d' ' -f1 > SHA256)
fi

# The repository travels too (its tracked files); each call must stay under 64 MiB, or the
# device tool refuses it (and the benchmark call then finds no page: device.sh stops).
repo=$(cd "$ROOT" && git ls-files -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
mib() { du -cb "$@" | tail -1 | awk -v r="$repo" '{t = ($1 + r) / 1048576; printf "%.1f MiB with the repository%s", t, (t > 64 ? ": OVER 64 MiB" : "")}'; }
echo "call 1: $(mib "$CB/gl" "$CB/chrA.tar.xz")"
echo "call 2: $(mib "$CB/chrB.tar.xz" "$CB/model/part0")"
echo "call 3: $(mib "$CB/libs.tar.xz" "$CB/model/part1")"
echo "call 4: $(mib "$CB/model/part2" "$CB/dist.tar.xz")"
echo "call 5: $(mib "$CB/model/part3" "$CB/wllama.tar.xz")"
echo "call 6: $(mib "$CB/model/part4" "$CB/model/SHA256" "$CB/coco") + the benchmark"
