# Native Vulkan on the device machine (../shared/DEVICE.md), sourced by the scripts run there
# (bench_decode_h200.sh, bench_sampling_h200.sh, coop_check_h200.sh, kernel_stats_h200.sh)
# from the repository root: the Debian libvulkan1 loader carried in .gl/ (the image has the
# NVIDIA driver but no loader), and the driver's EGL build as the only ICD (headless, the
# image's GLX ICD gives no vkCreateInstance).
for f in .gl/*.deb; do dpkg -x "$f" /; done
ldconfig
export XDG_RUNTIME_DIR=$(mktemp -d) WGPU_BACKEND=vulkan
printf '{"file_format_version":"1.0.1","ICD":{"library_path":"libEGL_nvidia.so.0","api_version":"1.4.312"}}\n' > /tmp/nvidia_egl_icd.json
export VK_DRIVER_FILES=/tmp/nvidia_egl_icd.json VK_ICD_FILENAMES=/tmp/nvidia_egl_icd.json
