//! The WGSL sources in `shaders/`, embedded at compile time, and a small preprocessor:
//! `#include "common/x.wgsl"` (recursive, each file once per shader) and `#ifdef NAME` /
//! `#ifndef NAME` / `#else` / `#endif` blocks, which nest.
//!
//! Defines pick a kernel's variant: a weight type's dequantizer, a binding layout, a stage of
//! a multi-stage kernel, a fused prologue or epilogue. Scalars (sizes, positions, settings)
//! reach every kernel through its uniform `Params` at `@binding(0)`, packed per dispatch by
//! the `StepRecorder`; no kernel uses WGSL `override`s.

// `SHADER_FILES`: every file under `shaders/`, by relative path (written by build.rs).
include!(concat!(env!("OUT_DIR"), "/shaders.rs"));

/// The source of `shaders/<name>`, or `None` if no such file is embedded.
pub fn shader_source(name: &str) -> Option<&'static str> {
    SHADER_FILES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
}

/// Expands includes (recursively, each file once) and the `#ifdef` blocks for `defines`.
/// Panics on a missing include or unbalanced `#ifdef`: shader sources are compiled in, so
/// that is a bug in coco, caught by every test that builds the pipeline.
pub fn preprocess(name: &str, defines: &[&str]) -> String {
    preprocess_with(name, defines, &mut Vec::new())
}

/// [`preprocess`] sharing `included` (the files already expanded) with earlier calls, so that
/// a shader assembled from several roots gets each common include once (the FFN megakernel
/// appends a second weight type's dequantizer, which may include the K-quant scales again).
pub fn preprocess_with(name: &str, defines: &[&str], included: &mut Vec<String>) -> String {
    let mut out = String::new();
    expand(name, defines, &mut out, included);
    out
}

fn expand(name: &str, defines: &[&str], out: &mut String, included: &mut Vec<String>) {
    if included.iter().any(|n| n == name) {
        return;
    }
    included.push(name.to_string());
    let source = shader_source(name).unwrap_or_else(|| panic!("shader `{name}` is not embedded"));
    // Stack of "is this branch active" for nested #ifdef.
    let mut active: Vec<bool> = Vec::new();
    for line in source.lines() {
        let trimmed = line.trim();
        let enabled = active.iter().all(|a| *a);
        if let Some(rest) = trimmed.strip_prefix("#ifdef ") {
            active.push(defines.contains(&rest.trim()));
        } else if let Some(rest) = trimmed.strip_prefix("#ifndef ") {
            active.push(!defines.contains(&rest.trim()));
        } else if trimmed == "#else" {
            let top = active
                .last_mut()
                .unwrap_or_else(|| panic!("{name}: #else without #ifdef"));
            *top = !*top;
        } else if trimmed == "#endif" {
            active
                .pop()
                .unwrap_or_else(|| panic!("{name}: #endif without #ifdef"));
        } else if let Some(rest) = trimmed.strip_prefix("#include ") {
            if enabled {
                expand(rest.trim().trim_matches('"'), defines, out, included);
            }
        } else if enabled {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(active.is_empty(), "{name}: unterminated #ifdef");
}

/// The binding layout entries of group 0 that the preprocessed `source` declares, whether or
/// not its `main` reads them: `var<uniform>` at a binding is a uniform buffer with a dynamic
/// offset (the step's parameter block, `StepRecorder`), `var<storage, read>` a read-only
/// storage buffer, `var<storage, read_write>` a writable one, each visible to compute. A binding is a number, a module `const NAME: u32 = Nu;`, or such a name plus a
/// number (`B_Y + 1u`), as coco's kernels write them. Panics on any other form: the sources are
/// compiled in, so that is a bug in coco, caught by the unit test of this function.
pub fn declared_bindings(source: &str) -> Vec<wgpu::BindGroupLayoutEntry> {
    let constant = |name: &str| -> u32 {
        let prefix = format!("const {name}: u32 = ");
        source
            .lines()
            .find_map(|line| line.trim().strip_prefix(prefix.as_str()))
            .and_then(|rest| rest.strip_suffix("u;"))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("binding constant {name} is not a `const {name}: u32 = Nu;`"))
    };
    let term = |t: &str| -> u32 {
        let t = t.trim();
        t.trim_end_matches('u')
            .parse()
            .unwrap_or_else(|_| constant(t))
    };
    let mut entries: Vec<wgpu::BindGroupLayoutEntry> = source
        .lines()
        .filter_map(|line| {
            let rest = line.trim().strip_prefix("@group(0) @binding(")?;
            let (binding, rest) = rest.split_once(')')?;
            let binding = binding.split('+').map(term).sum();
            let space = rest.trim().strip_prefix("var<")?.split_once('>')?.0;
            let ty = match space.replace(' ', "").as_str() {
                "uniform" => return Some(params_entry(binding)),
                "storage,read" => wgpu::BufferBindingType::Storage { read_only: true },
                "storage,read_write" => wgpu::BufferBindingType::Storage { read_only: false },
                other => panic!("binding {binding}: address space {other:?}"),
            };
            Some(buffer_entry(binding, ty))
        })
        .collect();
    entries.sort_by_key(|e| e.binding);
    entries
}

/// A compute stage's buffer at `binding`, any size, no dynamic offset.
fn buffer_entry(binding: u32, ty: wgpu::BufferBindingType) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}

/// The parameter uniform at `binding`: its block's offset in the step's params buffer is
/// given at each dispatch, so one bind group serves the kernel wherever its block lies.
fn params_entry(binding: u32) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: true,
            min_binding_size: None,
        },
        count: None,
    }
}

#[cfg(test)]
/// Parses and validates `source` with every naga capability and writes SPIR-V, as wgpu
/// does on Vulkan: catches shader errors in variants lavapipe can't run. Returns the
/// workgroup memory its entry point uses, in bytes.
pub(crate) fn compile_to_spirv(label: &str, source: &str) -> u32 {
    let module = naga::front::wgsl::parse_str(source)
        .unwrap_or_else(|e| panic!("{label}: {}", e.emit_to_string(source)));
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .unwrap_or_else(|e| panic!("{label}: {}", e.emit_to_string(source)));
    naga::back::spv::write_vec(&module, &info, &Default::default(), None)
        .unwrap_or_else(|e| panic!("{label}: {e}"));
    let mut layouter = naga::proc::Layouter::default();
    layouter.update(module.to_ctx()).expect("layout");
    let entry = info.get_entry_point(0);
    module
        .global_variables
        .iter()
        .filter(|&(h, v)| v.space == naga::AddressSpace::WorkGroup && !entry[h].is_empty())
        .map(|(_, v)| layouter[v.ty].size)
        .sum()
}

#[cfg(test)]
/// The layout entries of the bindings `source`'s entry point reads or writes, from naga's
/// analysis: what wgpu's automatic layout holds (an oracle for [`declared_bindings`]).
pub(crate) fn used_bindings(source: &str) -> Vec<wgpu::BindGroupLayoutEntry> {
    let module = naga::front::wgsl::parse_str(source).expect("parse");
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .expect("validate");
    let entry = info.get_entry_point(0);
    let mut entries: Vec<wgpu::BindGroupLayoutEntry> = module
        .global_variables
        .iter()
        .filter(|&(h, _)| !entry[h].is_empty())
        .filter_map(|(_, v)| {
            let ty = match v.space {
                naga::AddressSpace::Uniform => {
                    return Some(params_entry(v.binding.as_ref()?.binding))
                }
                naga::AddressSpace::Storage { access } => wgpu::BufferBindingType::Storage {
                    read_only: !access.contains(naga::StorageAccess::STORE),
                },
                _ => return None,
            };
            Some(buffer_entry(v.binding.as_ref()?.binding, ty))
        })
        .collect();
    entries.sort_by_key(|e| e.binding);
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The declared bindings, parsed from the text, are what naga finds the entry point
    /// binding, for a kernel with literal binding numbers and one with named and summed ones.
    #[test]
    fn declared_bindings_match_the_compiler() {
        for defines in [&["FINISH"][..], &["HISTOGRAM", "PENALIZE"]] {
            let source = preprocess("sample.wgsl", defines);
            assert_eq!(
                declared_bindings(&source),
                used_bindings(&source),
                "{defines:?}"
            );
        }
        let consts = "const B_Y: u32 = 3u;\n";
        let source = format!(
            "{consts}@group(0) @binding(0) var<uniform> p: vec4<u32>;\n\
             @group(0) @binding(1) var<storage, read> a: array<f32>;\n\
             @group(0) @binding(B_Y + 1u) var<storage, read_write> c: array<f32>;\n\
             @group(0) @binding(B_Y) var<storage, read_write> b: array<f32>;\n\
             @compute @workgroup_size(1)\nfn main() {{ b[0] = a[0] + f32(p.x); c[0] = 1.0; }}\n"
        );
        let declared = declared_bindings(&source);
        assert_eq!(declared, used_bindings(&source));
        let numbers: Vec<u32> = declared.iter().map(|e| e.binding).collect();
        assert_eq!(numbers, [0, 1, 3, 4]);
    }

    /// What the header promises: nested blocks, `#ifndef`, `#else`, and includes expanded once.
    #[test]
    fn nested_blocks_and_includes_once() {
        // sample.wgsl's stages are blocks, PENALIZE nests inside HISTOGRAM's main, and its
        // common include (order keys) comes in once.
        let finish = preprocess("sample.wgsl", &["FINISH"]);
        assert!(finish.contains("var<storage, read> cands"));
        assert!(!finish.contains("var<workgroup> recent_ids"));
        assert_eq!(finish.matches("fn key_of").count(), 1);
        let plain = preprocess("sample.wgsl", &["HISTOGRAM"]);
        assert!(!plain.contains("penalize(li"));
        let penalized = preprocess("sample.wgsl", &["HISTOGRAM", "PENALIZE"]);
        assert!(penalized.contains("penalize(li") && penalized.contains("recent_ids"));
        assert!(!penalized.contains("fn choose"));
        // A file included twice along two paths appears once.
        let mut included = Vec::new();
        let first = preprocess_with("common/dequant_k_scales.wgsl", &[], &mut included);
        let again = preprocess_with("common/dequant_k_scales.wgsl", &[], &mut included);
        assert!(!first.is_empty() && again.is_empty());
        assert!(!shader_source("sample.wgsl").unwrap().contains("override "));
    }
}
