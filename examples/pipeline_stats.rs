//! What the Vulkan driver made of each kernel: its compile statistics, through
//! `VK_KHR_pipeline_executable_properties`. NVIDIA's 580 driver reports registers per thread,
//! shared memory, stack size (where spilled registers would show) and binary size (÷ 16 ≈
//! instructions); its "Local Memory Size" reads 2^36 for every kernel, so it says nothing. On
//! an H100 or H200 each line ends with the workgroups one SM holds and the limit that binds.
//! Timings say how long a kernel takes; these say whether registers cap its resident warps,
//! which no timing separates.
//!
//!   COCO_DUMP_WGSL=/tmp/wgsl coco bench -m M.gguf -p 512 -n 4    # the kernels a run compiles
//!   cargo run --release --example pipeline_stats -- /tmp/wgsl [filter] [--no-zero-init] [--ir]
//!
//! Each `<label>.wgsl` is compiled to SPIR-V by naga with the options wgpu's Vulkan backend
//! uses for coco's kernels (bounds checks on workgroup arrays, no loop bounding, no integer
//! division checks, workgroup memory zeroed natively: `--no-zero-init` leaves that out), then
//! into a compute pipeline of a device opened through wgpu-hal with the extension added. Only
//! labels containing `filter` are compiled. `--ir` also prints the driver's internal
//! representations where it offers any (text only; NVIDIA's 580 offers none).
//!
//! A diagnostic, native Vulkan only. A driver without the extension (lavapipe 22) is reported,
//! and each kernel is still built into a pipeline, which checks the SPIR-V and the layout.
//! `scripts/kernel_stats_h200.sh` runs both steps on the device machine.

use anyhow::{bail, Context, Result};
use ash::vk;
use std::ffi::CStr;
use wgpu::hal;

fn main() -> Result<()> {
    let mut dir = None;
    let mut filter = String::new();
    let mut zero_init = true;
    let mut show_ir = false;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--no-zero-init" => zero_init = false,
            "--ir" => show_ir = true,
            _ if dir.is_none() => dir = Some(arg),
            _ => filter = arg,
        }
    }
    let dir = dir.context("usage: pipeline_stats DIR [filter] [--no-zero-init] [--ir]")?;
    let mut sources: Vec<(String, String)> = Vec::new();
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {dir}"))? {
        let path = entry?.path();
        let Some(label) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.extension().is_some_and(|e| e == "wgsl") && label.contains(&filter) {
            sources.push((label.to_string(), std::fs::read_to_string(&path)?));
        }
    }
    sources.sort();
    if sources.is_empty() {
        bail!("no .wgsl files in {dir} with {filter:?} in their names");
    }

    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::VULKAN,
        ..wgpu::InstanceDescriptor::new_without_display_handle_from_env()
    });
    let adapter = pollster::block_on(instance.request_adapter(&Default::default()))
        .context("no Vulkan adapter")?;
    let info = adapter.get_info();
    println!("adapter: {} ({:?})", info.name, info.driver_info);
    // Residency is estimated with Hopper's limits, so only there (the H100 and H200).
    let sm90 = info.vendor == 0x10de && (info.name.contains("H100") || info.name.contains("H200"));
    // SAFETY: the adapter is a Vulkan one (the instance has no other backend).
    let hal_adapter = unsafe { adapter.as_hal::<hal::api::Vulkan>() }.context("not Vulkan")?;
    let name = ash::khr::pipeline_executable_properties::NAME;
    // Without the extension the kernels are still compiled, to check the SPIR-V and the
    // pipelines (lavapipe 22 has none), and each line says so.
    let offered = hal_adapter
        .physical_device_capabilities()
        .supports_extension(name);
    if !offered {
        println!("this driver lacks {name:?}: pipelines are built, no statistics read");
    }
    let mut wanted = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
        .pipeline_executable_info(true);
    let features = adapter.features();
    // SAFETY: the callback only adds an extension the device offers and its feature.
    let open = unsafe {
        hal_adapter.open_with_callback(
            features,
            &adapter.limits(),
            &wgpu::MemoryHints::Performance,
            Some(Box::new(|args: hal::vulkan::CreateDeviceCallbackArgs| {
                if offered {
                    args.extensions.push(name);
                    *args.create_info = args.create_info.push_next(&mut wanted);
                }
            })),
        )
    }
    .map_err(|e| anyhow::anyhow!("opening the device: {e:?}"))?;
    let device = open.device.raw_device();
    let vk_instance = open.device.shared_instance().raw_instance();
    let stats_fns =
        offered.then(|| ash::khr::pipeline_executable_properties::Device::new(vk_instance, device));

    for (label, source) in &sources {
        match spirv(source, zero_init) {
            Ok(built) => {
                // SAFETY: the device is live; every object made here is destroyed in `report`.
                let stats = stats_fns.as_ref();
                if let Err(e) = unsafe { report(device, stats, label, &built, sm90, show_ir) } {
                    println!("{label}: the driver refused it: {e}");
                }
            }
            Err(e) => println!("{label}: naga: {e}"),
        }
    }
    Ok(())
}

/// A kernel as built: its SPIR-V, its bindings in group 0 (binding, whether a storage
/// buffer) and its workgroup's invocations.
struct Built {
    words: Vec<u32>,
    bindings: Vec<(u32, bool)>,
    threads: u32,
}

/// The SPIR-V of a kernel's WGSL with wgpu's options for coco's kernels.
fn spirv(source: &str, zero_init: bool) -> Result<Built> {
    use naga::back::spv;
    let module = naga::front::wgsl::parse_str(source).map_err(|e| anyhow::anyhow!("{e}"))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let mut bindings = Vec::new();
    for (_, var) in module.global_variables.iter() {
        if let Some(b) = &var.binding {
            if b.group != 0 {
                bail!("binding group {} (coco uses group 0 only)", b.group);
            }
            let storage = matches!(var.space, naga::AddressSpace::Storage { .. });
            bindings.push((b.binding, storage));
        }
    }
    let options = spv::Options {
        lang_version: (1, 6),
        capabilities: None,
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: naga::proc::BoundsCheckPolicy::Restrict,
            buffer: naga::proc::BoundsCheckPolicy::Unchecked,
            image_load: naga::proc::BoundsCheckPolicy::Unchecked,
            binding_array: naga::proc::BoundsCheckPolicy::Unchecked,
        },
        zero_initialize_workgroup_memory: if zero_init {
            spv::ZeroInitializeWorkgroupMemoryMode::Native
        } else {
            spv::ZeroInitializeWorkgroupMemoryMode::None
        },
        force_loop_bounding: false,
        emit_int_div_checks: false,
        ..spv::Options::default()
    };
    let pipeline = spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: "main".into(),
    };
    let words = spv::write_vec(&module, &info, &options, Some(&pipeline))?;
    let threads = module
        .entry_points
        .iter()
        .find(|e| e.name == "main")
        .map_or(1, |e| e.workgroup_size.iter().product());
    Ok(Built {
        words,
        bindings,
        threads,
    })
}

/// Builds the pipeline with statistics captured and prints them on one line per executable.
unsafe fn report(
    device: &ash::Device,
    stats_fns: Option<&ash::khr::pipeline_executable_properties::Device>,
    label: &str,
    built: &Built,
    sm90: bool,
    show_ir: bool,
) -> Result<()> {
    let words = &built.words;
    let layout_bindings: Vec<_> = built
        .bindings
        .iter()
        .map(|&(binding, storage)| {
            vk::DescriptorSetLayoutBinding::default()
                .binding(binding)
                .descriptor_type(if storage {
                    vk::DescriptorType::STORAGE_BUFFER
                } else {
                    vk::DescriptorType::UNIFORM_BUFFER
                })
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
        })
        .collect();
    let set_layout = device.create_descriptor_set_layout(
        &vk::DescriptorSetLayoutCreateInfo::default().bindings(&layout_bindings),
        None,
    )?;
    let set_layouts = [set_layout];
    let layout = device.create_pipeline_layout(
        &vk::PipelineLayoutCreateInfo::default().set_layouts(&set_layouts),
        None,
    )?;
    let module =
        device.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(words), None)?;
    let entry = c"main";
    let flags = match stats_fns {
        Some(_) => {
            vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
                | vk::PipelineCreateFlags::CAPTURE_INTERNAL_REPRESENTATIONS_KHR
        }
        None => vk::PipelineCreateFlags::empty(),
    };
    let info = vk::ComputePipelineCreateInfo::default()
        .flags(flags)
        .stage(
            vk::PipelineShaderStageCreateInfo::default()
                .stage(vk::ShaderStageFlags::COMPUTE)
                .module(module)
                .name(entry),
        )
        .layout(layout);
    let created = device.create_compute_pipelines(vk::PipelineCache::null(), &[info], None);
    let result = match created {
        Ok(pipelines) => {
            let pipeline = pipelines[0];
            let printed = match stats_fns {
                Some(f) => print_stats(f, label, pipeline, built.threads, sm90, show_ir),
                None => {
                    println!("{label}: built ({} SPIR-V words)", words.len());
                    Ok(())
                }
            };
            device.destroy_pipeline(pipeline, None);
            printed
        }
        Err((_, e)) => Err(anyhow::anyhow!("{e}")),
    };
    device.destroy_shader_module(module, None);
    device.destroy_pipeline_layout(layout, None);
    device.destroy_descriptor_set_layout(set_layout, None);
    result
}

unsafe fn print_stats(
    stats_fns: &ash::khr::pipeline_executable_properties::Device,
    label: &str,
    pipeline: vk::Pipeline,
    threads: u32,
    sm90: bool,
    show_ir: bool,
) -> Result<()> {
    let executables = stats_fns
        .get_pipeline_executable_properties(&vk::PipelineInfoKHR::default().pipeline(pipeline))?;
    for index in 0..executables.len() as u32 {
        let exec = vk::PipelineExecutableInfoKHR::default()
            .pipeline(pipeline)
            .executable_index(index);
        let mut line = format!("{label}:");
        let (mut registers, mut shared) = (None, None);
        for s in stats_fns.get_pipeline_executable_statistics(&exec)? {
            let name = text(s.name_as_c_str());
            if s.format == vk::PipelineExecutableStatisticFormatKHR::UINT64 {
                match name.as_str() {
                    "Register Count" => registers = Some(s.value.u64),
                    "Shared Memory Size" => shared = Some(s.value.u64),
                    _ => {}
                }
            }
            let value = match s.format {
                vk::PipelineExecutableStatisticFormatKHR::BOOL32 => format!("{}", s.value.b32 != 0),
                vk::PipelineExecutableStatisticFormatKHR::INT64 => format!("{}", s.value.i64),
                vk::PipelineExecutableStatisticFormatKHR::UINT64 => format!("{}", s.value.u64),
                vk::PipelineExecutableStatisticFormatKHR::FLOAT64 => format!("{}", s.value.f64),
                _ => "?".into(),
            };
            line.push_str(&format!(" {name}={value};"));
        }
        if let (true, Some(registers), Some(shared)) = (sm90, registers, shared) {
            line.push_str(&format!(" {}", residency_sm90(registers, shared, threads)));
        }
        println!("{line}");
        if show_ir {
            print_ir(stats_fns, &exec)?;
        }
    }
    Ok(())
}

/// The driver's text representations of one executable (two calls: sizes, then the text).
unsafe fn print_ir(
    stats_fns: &ash::khr::pipeline_executable_properties::Device,
    exec: &vk::PipelineExecutableInfoKHR,
) -> Result<()> {
    let sized = stats_fns.get_pipeline_executable_internal_representations(exec)?;
    let mut buffers: Vec<Vec<u8>> = sized.iter().map(|r| vec![0u8; r.data_size]).collect();
    let mut reps: Vec<vk::PipelineExecutableInternalRepresentationKHR> = sized
        .iter()
        .zip(buffers.iter_mut())
        .map(|(r, buf)| vk::PipelineExecutableInternalRepresentationKHR {
            data_size: r.data_size,
            p_data: buf.as_mut_ptr().cast(),
            ..Default::default()
        })
        .collect();
    let mut count = reps.len() as u32;
    (stats_fns
        .fp()
        .get_pipeline_executable_internal_representations_khr)(
        stats_fns.device(),
        exec,
        &mut count,
        reps.as_mut_ptr(),
    )
    .result()?;
    for (rep, buf) in reps.iter().zip(&buffers) {
        println!(
            "--- {} ({})",
            text(rep.name_as_c_str()),
            text(rep.description_as_c_str())
        );
        if rep.is_text != 0 {
            println!("{}", String::from_utf8_lossy(buf).trim_end_matches('\0'));
        } else {
            println!("({} bytes, binary)", rep.data_size);
        }
    }
    Ok(())
}

/// Workgroups of `threads` invocations one SM holds at once by sm_90's limits (H100, H200:
/// 65,536 registers allocated per warp in steps of 256, 228 KiB of shared memory of which 1
/// KiB is reserved per workgroup, 2,048 threads, 32 workgroups), and which limit binds.
fn residency_sm90(registers: u64, shared: u64, threads: u32) -> String {
    let warps = u64::from(threads.div_ceil(32)).max(1);
    let per_warp = (registers * 32).div_ceil(256) * 256;
    let by_registers = 65_536 / (per_warp * warps).max(1);
    let by_shared = (228 * 1024) / (shared + 1024);
    let by_threads = 2_048 / (warps * 32);
    let limits = [
        (by_registers, "registers"),
        (by_shared, "shared memory"),
        (by_threads, "threads"),
        (32, "workgroups"),
    ];
    let (n, bound) = limits.into_iter().min_by_key(|l| l.0).unwrap();
    format!("resident per SM (sm_90 limits)={n} of {threads} threads, bound by {bound};")
}

fn text(s: Result<&CStr, std::ffi::FromBytesUntilNulError>) -> String {
    s.map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::residency_sm90;

    /// The H100's statistics of session 40 (BENCHMARKS.md): the 128-token tensor-core tiles'
    /// 158 registers leave room for one workgroup of 256, the 64 × 64 tiles' 82 for two, the
    /// decode matvec's 64 for four; at 128 KiB of shared memory nothing else binds.
    #[test]
    fn residency_follows_the_tightest_limit() {
        let wg = |r, s, t| residency_sm90(r, s, t);
        assert!(wg(158, 49_152, 256).starts_with("resident per SM (sm_90 limits)=1 "));
        assert!(wg(158, 49_152, 256).contains("registers"));
        assert!(wg(128, 49_152, 256).contains("=2 "));
        assert!(wg(82, 32_768, 256).contains("=2 "));
        assert!(wg(80, 32_768, 256).contains("=3 "));
        assert!(wg(64, 6_400, 256).contains("=4 "));
        assert!(wg(16, 131_072, 256).contains("=1 ") && wg(16, 131_072, 256).contains("shared"));
        assert!(wg(16, 0, 32).contains("=32 ") && wg(16, 0, 32).contains("workgroups"));
        assert!(wg(16, 0, 1024).contains("=2 ") && wg(16, 0, 1024).contains("threads"));
    }
}
