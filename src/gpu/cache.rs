//! The context's caches of compiled kernels and bind groups. Every dispatch of every step
//! looks both up, so a hit allocates nothing: kernels by a typed variant key (or a label),
//! bind groups by an FxHash of what they bind, compared field by field with the dispatch.
//!
//! Why it matters: a token of the Llama-3.2-1B shape is 83 dispatches; the H200 spent ~8 µs
//! of host time on each (BENCHMARKS.md "session 33"), ~1.8 of it coco's own recording, most
//! of that malloc/free (a label string, a bindings Vec, a parameter Vec, SipHash) — on the
//! Qwen shape the host took 94% of the GPU step.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHasher};

/// FxHash (rustc's): a few instructions per word, for keys no adversary chooses.
pub(crate) type FxBuild = BuildHasherDefault<FxHasher>;

use super::recorder::Binding;

/// A compiled kernel variant: its pipeline, the label that names it (the variant: STYLE.md's
/// `matmul_q4_k_tiled`; profiles and errors print it) and its bind group layout.
#[derive(Debug)]
pub struct Kernel {
    pub pipeline: wgpu::ComputePipeline,
    pub label: String,
    pub(crate) layout: wgpu::BindGroupLayout,
}

/// Compiled kernels, by label and by typed variant key (both lead to one [`Kernel`] per
/// label), and the compiled pipelines by their WGSL: labels whose sources are the same text
/// share one pipeline. The tiles split K by a runtime parameter whose count changes with the
/// step's token tiles (`tile_splits`: the Llama-1B shape's W_o on the 64 × 64 tiles 8 ways for
/// one or two token tiles, 6 for three, 4 for four); each count has its own label (`_k4`,
/// which profiles show) but the same source, so each was another compile of one kernel (in a
/// browser, at the first prompt of that length).
#[derive(Default)]
pub(crate) struct KernelCache {
    by_label: HashMap<String, Arc<Kernel>>,
    /// (the key's type, its FxHash) → the keys with that hash, each with its kernel.
    by_key: FxHashMap<(TypeId, u64), Vec<KeyedKernel>>,
    by_source: HashMap<SourceId, (wgpu::ComputePipeline, wgpu::BindGroupLayout)>,
}

/// A WGSL source by two independent 64-bit hashes and its length (kept instead of the text,
/// ~50 KB a kernel, which the page's wasm heap would hold for every variant).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct SourceId(u64, u64, usize);

impl SourceId {
    pub fn of(source: &str) -> SourceId {
        // SipHash with fixed keys, and FxHash.
        let mut sip = std::collections::hash_map::DefaultHasher::new();
        source.hash(&mut sip);
        SourceId(sip.finish(), fx_hash(&source), source.len())
    }
}

/// A variant key (of any type: the cache holds several kernels' keys) and its kernel.
type KeyedKernel = (Box<dyn Any + Send + Sync>, Arc<Kernel>);

impl KernelCache {
    pub fn by_label(&self, label: &str) -> Option<Arc<Kernel>> {
        self.by_label.get(label).cloned()
    }

    pub fn insert_label(&mut self, kernel: Arc<Kernel>) {
        self.by_label.insert(kernel.label.clone(), kernel);
    }

    pub fn by_key<K: Hash + Eq + 'static>(&self, key: &K) -> Option<Arc<Kernel>> {
        let bucket = self.by_key.get(&(TypeId::of::<K>(), fx_hash(key)))?;
        bucket
            .iter()
            .find(|(k, _)| k.downcast_ref::<K>() == Some(key))
            .map(|(_, kernel)| kernel.clone())
    }

    pub fn insert_key<K: Hash + Eq + Send + Sync + 'static>(
        &mut self,
        key: K,
        kernel: Arc<Kernel>,
    ) {
        self.by_key
            .entry((TypeId::of::<K>(), fx_hash(&key)))
            .or_default()
            .push((Box::new(key), kernel));
    }

    /// The pipeline compiled from `source`, if one was.
    pub fn by_source(
        &self,
        source: SourceId,
    ) -> Option<(wgpu::ComputePipeline, wgpu::BindGroupLayout)> {
        self.by_source.get(&source).cloned()
    }

    pub fn insert_source(&mut self, source: SourceId, kernel: &Kernel) {
        self.by_source
            .insert(source, (kernel.pipeline.clone(), kernel.layout.clone()));
    }

    /// Pipelines compiled (distinct sources).
    pub fn len(&self) -> usize {
        self.by_source.len()
    }
}

fn fx_hash<K: Hash>(key: &K) -> u64 {
    FxBuild::default().hash_one(key)
}

/// Bind groups kept at most; beyond this the cache starts over (bounds memory when many
/// sessions come and go).
const MAX_CACHED_BIND_GROUPS: usize = 16_384;

/// One cached bind group and what it binds.
struct CachedBindGroup {
    layout: wgpu::BindGroupLayout,
    /// The size of the parameter block it binds (its offset is dynamic).
    params_size: u64,
    storage: Vec<Binding>,
    group: wgpu::BindGroup,
}

impl CachedBindGroup {
    fn binds(&self, layout: &wgpu::BindGroupLayout, params_size: u64, storage: &[Binding]) -> bool {
        self.layout == *layout
            && self.params_size == params_size
            && self.storage.len() == storage.len()
            && self
                .storage
                .iter()
                .zip(storage)
                .all(|(a, b)| a.same_range(b))
    }
}

/// Bind groups by (layout, parameter block size, storage ranges). Kernels share layouts by
/// their declared bindings and take their parameter block's offset at the dispatch, so a
/// bind group serves every kernel of its layout that binds the same buffers, wherever its
/// block lies in the step: a decode step's after the first token, a product's tile
/// variants at any prompt length. Keyed by the FxHash of those; a lookup compares the entry
/// with the dispatch, and where two differ under one hash the newer takes the slot (a cache:
/// the other is made anew if it comes back).
#[derive(Default)]
pub(crate) struct BindGroupCache {
    groups: HashMap<u64, CachedBindGroup, FxBuild>,
}

impl BindGroupCache {
    /// The bind group of `layout` with a `params_size`-byte block of `params_buffer` at
    /// binding 0 (offset given at the dispatch) and `storage` at 1, 2, …: cached, or created
    /// and cached.
    pub fn get_or_create(
        &mut self,
        device: &wgpu::Device,
        layout: &wgpu::BindGroupLayout,
        params_buffer: &wgpu::Buffer,
        params_size: u64,
        storage: &[Binding],
    ) -> wgpu::BindGroup {
        let mut hasher = FxBuild::default().build_hasher();
        layout.hash(&mut hasher);
        params_size.hash(&mut hasher);
        for b in storage {
            b.buffer.hash(&mut hasher);
            (b.offset, b.size).hash(&mut hasher);
        }
        let hash = hasher.finish();
        if let Some(cached) = self.groups.get(&hash) {
            if cached.binds(layout, params_size, storage) {
                return cached.group.clone();
            }
        }
        if self.groups.len() >= MAX_CACHED_BIND_GROUPS {
            self.groups.clear();
        }
        let buffer = |buffer, offset, size: Option<u64>| {
            wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer,
                offset,
                size: size.and_then(wgpu::BufferSize::new),
            })
        };
        let entries: Vec<wgpu::BindGroupEntry> =
            std::iter::once(buffer(params_buffer, 0, Some(params_size)))
                .chain(storage.iter().map(|b| buffer(&b.buffer, b.offset, b.size)))
                .enumerate()
                .map(|(i, resource)| wgpu::BindGroupEntry {
                    binding: i as u32,
                    resource,
                })
                .collect();
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout,
            entries: &entries,
        });
        self.groups.insert(
            hash,
            CachedBindGroup {
                layout: layout.clone(),
                params_size,
                storage: storage.to_vec(),
                group: group.clone(),
            },
        );
        group
    }

    /// Drops the bind groups that bind any of `buffers`.
    pub fn forget_using(&mut self, buffers: &[&wgpu::Buffer]) {
        self.groups
            .retain(|_, g| !g.storage.iter().any(|b| buffers.contains(&&b.buffer)));
    }

    pub fn clear(&mut self) {
        self.groups.clear();
    }

    pub fn len(&self) -> usize {
        self.groups.len()
    }
}
