#!/bin/bash
# On the H200 (through the device tool, from the repository root): unpacks what this call
# carried from .carry-browser/ (prepare.sh), idempotently while the machine stays warm, then
# runs the named steps:
#   bench   the page in Chromium on the H200 (page_bench.py: auto and subgroups=0), wllama on
#           the same file in the same browser (wllama.html), then native `coco bench` on the
#           same file (default, COCO_SUBGROUPS=0)
# Env: RUNS (2), PP/TG (128), REPS (3), TOKENS (128), BENCH_PROMPT (short; long: the greedy
# generation after a ~128-token prompt, which the prefill GEMM runs), VARIANTS (page link
# variants, "auto subgroups=0"), NATIVE_ENVS (native runs besides the default,
# "COCO_SUBGROUPS=0"; an entry "A=1+B=2" sets both), DAWN_FEATURES (Dawn toggles
# for Chromium, e.g. vulkan_enable_f16_on_nvidia: shader-f16 on this GPU). $OUT gets page.jsonl,
# page-summary.json, page.png, native.jsonl and logs.txt (the device tool brings back 8 files a
# call).
CB=.carry-browser
H=$(cd "$(dirname "$0")" && pwd)
MODEL=/tmp/models/gemma-3-270m-q4_k_m.gguf
# glvnd + the Vulkan loader into / (NVIDIA's ICD returned no vkCreateInstance with
# libvulkan1 alone; with all of glvnd and the EGL vendor file below it lists the H200).
if [ -d $CB/gl ] && ! ldconfig -p | grep -q 'libGLX.so.0 '; then
  for f in $CB/gl/*.deb; do dpkg -x "$f" /; done; ldconfig
fi
mkdir -p /opt/chr/lib /tmp/models/parts
[ -f $CB/chrA.tar.xz ] && [ ! -x /opt/chr/chromium/chromium-headless-shell ] && tar -xJf $CB/chrA.tar.xz -C /opt/chr
[ -f $CB/chrB.tar.xz ] && [ ! -f /opt/chr/chromium/icudtl.dat ] && tar -xJf $CB/chrB.tar.xz -C /opt/chr
if [ -f $CB/libs.tar.xz ] && [ ! -f /opt/chr/fonts.conf ]; then
  mkdir -p /opt/chrlibs && tar -xJf $CB/libs.tar.xz -C /opt/chrlibs
  have=$(ldconfig -p | awk '{print $1}' | sort -u)
  # Only sonames the image lacks: its own libraries win.
  for f in /opt/chrlibs/usr/lib/x86_64-linux-gnu/*; do
    grep -qx "$(basename "$f")" <<<"$have" || cp -L "$f" /opt/chr/lib/
  done
  mkdir -p /tmp/fc
  printf '<?xml version="1.0"?><fontconfig><dir>/opt/chrlibs/usr/share/fonts</dir><dir>/usr/share/fonts</dir><cachedir>/tmp/fc</cachedir></fontconfig>\n' > /opt/chr/fonts.conf
fi
[ -f $CB/dist.tar.xz ] && { rm -rf /tmp/cocodist; tar -xJf $CB/dist.tar.xz -C /tmp; }
[ -f $CB/coco ] && install -m 755 $CB/coco /tmp/coco-native
[ -f $CB/wllama.tar.xz ] && { rm -rf /tmp/wllama; mkdir -p /tmp/wllama && tar -xJf $CB/wllama.tar.xz -C /tmp/wllama; }
for p in $CB/model/part* $CB/model/SHA256; do [ -f "$p" ] && cp "$p" /tmp/models/parts/; done
if [ ! -f $MODEL ] && [ "$(ls /tmp/models/parts/part* 2>/dev/null | wc -l)" = 5 ]; then
  cat /tmp/models/parts/part0 /tmp/models/parts/part1 /tmp/models/parts/part2 /tmp/models/parts/part3 \
    /tmp/models/parts/part4 > $MODEL.tmp
  if [ "$(sha256sum $MODEL.tmp | cut -d' ' -f1)" = "$(cat /tmp/models/parts/SHA256)" ]; then
    mv $MODEL.tmp $MODEL && rm -f /tmp/models/parts/part*
  else
    echo "model sha256 mismatch" >&2
  fi
fi
export LD_LIBRARY_PATH=/opt/chr/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FONTCONFIG_FILE=/opt/chr/fonts.conf CHROME=/opt/chr/chromium/chromium-headless-shell
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json:/opt/chr/chromium/vk_swiftshader_icd.json
export VK_ICD_FILENAMES=$VK_DRIVER_FILES __GLX_VENDOR_LIBRARY_NAME=nvidia
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
echo "have: wllama=$([ -f /tmp/wllama/package.json ] && echo yes) chrome=$([ -x $CHROME ] && echo yes) libs=$(ls /opt/chr/lib | wc -l) page=$([ -f /tmp/cocodist/index.html ] && echo yes) coco=$([ -x /tmp/coco-native ] && echo yes) model=$([ -f $MODEL ] && echo yes) parts=$(ls /tmp/models/parts 2>/dev/null | tr '\n' ' ')"
for step in "$@"; do
  case $step in
    bench)
      # Without the page, coco or the model (a call that carried them was refused or went to
      # a fresh machine) the browser would wait on nothing until the device tool's limit.
      missing=""
      [ -f /tmp/cocodist/index.html ] || missing="$missing page"
      [ -x /tmp/coco-native ] || missing="$missing coco"
      [ -f $MODEL ] || missing="$missing model"
      if [ -n "$missing" ]; then
        echo "not benchmarking: missing$missing (rerun the calls that carry them, back to back)" >&2
        exit 1
      fi
      nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
      python3 $H/serve.py 8080 /tmp/cocodist /models=/tmp/models >> $OUT/logs.txt 2>&1 &
      python3 $H/serve.py --coi 8123 $H /wllama=/tmp/wllama /m=/tmp/models >> $OUT/logs.txt 2>&1 &
      sleep 1.5
      PYTHONUNBUFFERED=1 python3 $H/page_bench.py --runs ${RUNS:-2} --pp ${PP:-128} --tg ${TG:-128} \
        --reps ${REPS:-3} --tokens ${TOKENS:-128} --bench-prompt ${BENCH_PROMPT:-short} ${DAWN_FEATURES:+--dawn-features $DAWN_FEATURES} $(for v in ${VARIANTS:-auto subgroups=0}; do echo --variant $v; done) --out $OUT \
        $([ -f /tmp/wllama/package.json ] && echo --wllama http://127.0.0.1:8123/wllama.html)
      # Native on the same file: Vulkan through a manifest naming the EGL build of NVIDIA's
      # driver (headless, the image's GLX manifest gives no vkCreateInstance to wgpu).
      printf '{"file_format_version":"1.0.1","ICD":{"library_path":"libEGL_nvidia.so.0","api_version":"1.4.312"}}\n' > /tmp/nvidia_egl_icd.json
      export VK_DRIVER_FILES=/tmp/nvidia_egl_icd.json VK_ICD_FILENAMES=/tmp/nvidia_egl_icd.json XDG_RUNTIME_DIR=$(mktemp -d)
      WGPU_BACKEND=vulkan /tmp/coco-native -v info -m $MODEL 2>&1 | grep '^adapter' || echo "native: no adapter line"
      for env in "" ${NATIVE_ENVS-COCO_SUBGROUPS=0}; do
        echo "native ${env:-default}:"
        env ${env//+/ } WGPU_BACKEND=vulkan /tmp/coco-native bench -m $MODEL -p ${PP:-128} -n ${TG:-128} --reps ${REPS:-3} --profile --json \
          > /tmp/native.json 2>> $OUT/logs.txt
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); d['env']=sys.argv[2]; print(json.dumps(d), file=open(sys.argv[3],'a')); print({k: d.get(k) for k in ('adapter','pp_tok_s','tg_tok_s','tg_sampled_tok_s','dispatches_per_token')})" /tmp/native.json "${env:-default}" $OUT/native.jsonl
      done
      ;;
  esac
done
