# Install steps shared by scripts/serve.sh and scripts/test.sh. Source it from the repository
# root; every function installs only what is missing or at the wrong version, so running
# either script twice costs seconds (a fresh machine builds trunk and wasm-bindgen-cli once:
# ~33 min with their own release profiles per ../shared/TOOLCHAIN.md, less with the faster
# profile below).
#
# Versions live here and nowhere else.
COCO_TRUNK_VERSION=0.21.14   # 0.22.x needs rustc 1.96

# apt packages given as `command-or-path:package` pairs; installs the packages whose command
# or file is missing, in one apt-get run.
coco_apt() {
  local need=() spec probe pkg
  for spec in "$@"; do
    probe=${spec%%:*}
    pkg=${spec##*:}
    if [[ $probe == /* ]]; then [ -e "$probe" ] && continue; else command -v "$probe" >/dev/null && continue; fi
    need+=("$pkg")
  done
  [ ${#need[@]} -eq 0 ] && return 0
  local sudo_=""
  [ "$(id -u)" = 0 ] || sudo_=sudo
  echo "apt: installing ${need[*]}"
  $sudo_ apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_ apt-get install -y -qq "${need[@]}" >/dev/null
}

coco_wasm_target() {
  rustup target list --installed | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
}

# The wasm-bindgen version in Cargo.lock: the CLI must match it exactly, or the generated JS
# and the wasm disagree.
coco_wasm_bindgen_version() {
  awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock
}

coco_have_trunk() {
  command -v trunk >/dev/null && trunk --version 2>/dev/null | grep -qw "$COCO_TRUNK_VERSION"
}

coco_have_wasm_bindgen() {
  local want
  want=$(coco_wasm_bindgen_version)
  command -v wasm-bindgen >/dev/null && wasm-bindgen --version 2>/dev/null | grep -qw "$want"
}

# Build tools fast rather than small: trunk's own release profile asks for fat LTO with one
# codegen unit, which is most of its ~27 min on 2 cores. A bundler that mostly waits on cargo
# and wasm-opt gains nothing from it. (Cargo applies CARGO_PROFILE_* to `cargo install` too.)
# Measured: trunk in 11 min at nice 19 on a 2-core machine busy with other builds, and it
# builds the page as before.
coco_fast_tool_build() {
  CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 CARGO_PROFILE_RELEASE_OPT_LEVEL=1 "$@"
}

coco_install_trunk() {
  coco_have_trunk && return 0
  echo "trunk: installing $COCO_TRUNK_VERSION"
  coco_fast_tool_build cargo install trunk --locked --version "$COCO_TRUNK_VERSION"
}

coco_install_wasm_bindgen() {
  coco_have_wasm_bindgen && return 0
  local want
  want=$(coco_wasm_bindgen_version)
  [ -n "$want" ] || { echo "wasm-bindgen: no version in Cargo.lock" >&2; return 1; }
  echo "wasm-bindgen-cli: installing $want"
  # Not --locked: its lock file names a webpki-roots version the registry here lacks.
  coco_fast_tool_build cargo install wasm-bindgen-cli --version "$want" --force
}

# Both Rust tools; the slow part of a fresh machine.
coco_install_web_tools() {
  coco_install_trunk
  coco_install_wasm_bindgen
}

# npm packages from package.json (binaryen@132's wasm-opt, playwright-core, vocabularies).
coco_npm() {
  if [ ! -f node_modules/.package-lock.json ] || [ package.json -nt node_modules/.package-lock.json ] \
    || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    npm install --no-audit --no-fund --loglevel=error
  fi
  # Debian's wasm-opt 108 breaks wasm-bindgen's externref table while trunk reports success;
  # make sure the one on PATH for trunk is binaryen 132.
  node_modules/.bin/wasm-opt --version | grep -q version_132 \
    || { echo "node_modules/.bin/wasm-opt is not binaryen 132" >&2; return 1; }
}

coco_model() {
  bash scripts/install_model.sh
}

# The page into dist/. Trunk.toml is offline, so cargo must have every crate already.
coco_build_page() {
  cargo fetch --quiet
  TRUNK_SKIP_VERSION_CHECK=true PATH="$PWD/node_modules/.bin:$PATH" trunk build --release
  [ -f dist/index.html ] || { echo "trunk build left no dist/index.html" >&2; return 1; }
}

# Mesa 26's lavapipe from Debian sid in .cache/lavapipe26, for the tensor-core tiles' tests.
# Debian 12's lavapipe (Mesa 22) has no cooperative matrices; sid's offers 8 × 8 × 8 f16 → f32
# blocks on subgroups of 8, which coco's tiles run with (GpuContext::coop_block), so their
# kernel tests run on a CPU. It needs sid's glibc, so a binary runs through sid's ld.so:
# .cache/lavapipe26/run is a runner for cargo (CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER)
# and .cache/lavapipe26/env the environment to source. sid moves, so the LLVM package is read
# from Mesa's dependencies; the set-up ends by checking that coco turns the tiles on there,
# and returns 1 (with the reason) otherwise.
coco_lavapipe26() {
  local dir=$PWD/.cache/lavapipe26
  if [ -f "$dir/ok" ]; then return 0; fi
  rm -rf "$dir"
  local apt=$dir/apt root=$dir/root
  mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$dir/debs" "$root"
  echo "deb http://deb.debian.org/debian sid main" >"$apt/sources.list"
  local o=(-oDir::State::Lists="$apt/lists" -oDir::Etc::SourceList="$apt/sources.list"
    -oDir::Etc::SourceParts=/dev/null -oDir::Cache="$apt/cache" -oAPT::Architecture=amd64
    -oDebug::NoLocking=1)
  apt-get "${o[@]}" update -qq >"$dir/apt.log" 2>&1 || { echo "lavapipe26: apt-get update failed ($dir/apt.log)"; return 1; }
  local llvm
  llvm=$(apt-cache "${o[@]}" show mesa-vulkan-drivers | sed -n 's/^Depends: //p' | head -1 | grep -o 'libllvm[0-9]*' | head -1)
  (cd "$dir/debs" && apt-get "${o[@]}" download mesa-vulkan-drivers "$llvm" libdisplay-info3 libxml2-16 \
    libwayland-client0 libvulkan1 libc6 libstdc++6 libgcc-s1 >>"$dir/apt.log" 2>&1) ||
    { echo "lavapipe26: downloading sid's Mesa and its libraries failed ($dir/apt.log)"; return 1; }
  local deb
  for deb in "$dir"/debs/*.deb; do dpkg-deb -x "$deb" "$root"; done
  local lib=$root/usr/lib/x86_64-linux-gnu
  printf '{"file_format_version":"1.0.1","ICD":{"library_path":"%s/libvulkan_lvp.so","api_version":"1.4.0"}}\n' "$lib" >"$dir/icd.json"
  printf '#!/bin/sh\nexec %s/ld-linux-x86-64.so.2 --library-path %s:/usr/lib/x86_64-linux-gnu:/lib/x86_64-linux-gnu "$@"\n' "$lib" "$lib" >"$dir/run"
  chmod +x "$dir/run"
  printf 'export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER=%s/run VK_ICD_FILENAMES=%s/icd.json WGPU_BACKEND=vulkan\n' "$dir" "$dir" >"$dir/env"
  local report
  report=$(cargo build --release --quiet --bin coco 2>&1 && VK_ICD_FILENAMES=$dir/icd.json WGPU_BACKEND=vulkan \
    XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-/tmp} "$dir/run" target/release/coco -v info -m tests/fixtures/llama-spm-q8_0.gguf 2>&1 |
    grep -E "^(adapter|cooperative matrix):")
  echo "$report"
  if ! grep -q "prefill GEMM: on (8x8x8" <<<"$report"; then
    echo "lavapipe26: coco does not run its tensor-core tiles on sid's lavapipe"
    return 1
  fi
  touch "$dir/ok"
}
