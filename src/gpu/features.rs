//! Which optional device features coco asks for, and how it learns what it got. Natively
//! wgpu names every feature coco uses. In the browser wgpu 30 can't request `subgroups` (its
//! web backend maps 16 WebGPU features and that one is not among them, wgpu issue 10146), so
//! coco asks for it itself (`browser_features.js`) and decides here whether its subgroup
//! kernels may run on what the browser granted.

use std::sync::atomic::{AtomicBool, Ordering};

/// Whether to use subgroup operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum SubgroupChoice {
    /// Where the device offers them, except on a browser's software adapter (SwiftShader),
    /// where the subgroup kernels are slower than the workgroup reductions (fixture decode in
    /// Chromium: 0.58 tok/s with them, 3.9 without).
    #[default]
    Auto,
    /// Wherever the device offers them (the page's `subgroups=1`, `COCO_SUBGROUPS=1`).
    On,
    /// Never: the workgroup-reduction kernels everywhere, for A/B runs (`subgroups=0`,
    /// `COCO_SUBGROUPS=0`).
    Off,
}

impl SubgroupChoice {
    /// "0" / "1" / anything else (auto), as links and the environment spell it.
    pub fn parse(v: &str) -> Self {
        match v.trim() {
            "0" => SubgroupChoice::Off,
            "1" => SubgroupChoice::On,
            _ => SubgroupChoice::Auto,
        }
    }
}

/// Who merges flash-decoding's key ranges (`kernels::attention`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AttentionMerge {
    /// The last split workgroup of each (token, head), found by an atomic arrival counter:
    /// one dispatch.
    #[default]
    InSplit,
    /// A second dispatch (`attention_combine`), the A/B baseline: the page's
    /// `attn_merge=separate`, `COCO_ATTN_MERGE=separate`.
    Separate,
}

impl AttentionMerge {
    /// "separate" / anything else (in the split kernel), as links and the environment spell it.
    pub fn parse(v: &str) -> Self {
        match v.trim() {
            "separate" => AttentionMerge::Separate,
            _ => AttentionMerge::InSplit,
        }
    }

    /// "in_split" or "separate", as `Coco.open` and bench records spell it.
    pub fn name(self) -> &'static str {
        match self {
            AttentionMerge::InSplit => "in_split",
            AttentionMerge::Separate => "separate",
        }
    }
}

/// The wide GEMM's register tile (`kernels::matmul`, `shaders/matmul/gemm_wide.wgsl`): W
/// rows (slots) × tokens per thread; the workgroup's 16 × 16 threads make a tile of 16× that.
/// 8 × 8 is not offered: it measured 3–4× slower than 4 × 8 on the H200 (its accumulators
/// left the registers; BENCHMARKS.md "session 16").
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct WideTile {
    pub slots: u32,
    pub tokens: u32,
    /// Staged and multiplied in f16 (`shaders/matmul/gemm_wide_f16.wgsl`), x' from the scale
    /// pass's f16 rows: where the device has shader-f16 ([`WideTile::f16`]).
    pub half: bool,
}

impl WideTile {
    /// Fastest first where each fills the GPU (H200, BENCHMARKS.md "session 16"): the order
    /// the automatic choice tries them in.
    pub const ALL: [WideTile; 3] = [
        WideTile::new(4, 8),
        WideTile::new(8, 4),
        WideTile::new(4, 4),
    ];

    pub const fn new(slots: u32, tokens: u32) -> WideTile {
        WideTile {
            slots,
            tokens,
            half: false,
        }
    }

    /// The same register tile in f16.
    pub const fn f16(self) -> WideTile {
        WideTile { half: true, ..self }
    }

    /// Slots and tokens of a workgroup's tile.
    pub fn tile(self) -> (u32, u32) {
        (16 * self.slots, 16 * self.tokens)
    }

    /// Elements of K staged per chunk: both f32 tiles within 16 KiB (WebGPU's guaranteed
    /// workgroup memory), and at most one 8-element group of each per thread and chunk. The f16
    /// tiles take 32 (12 KiB at most), whose partial sums they add up per 32 of K.
    pub fn chunk(self) -> u32 {
        let (n, t) = self.tile();
        if n + t > 128 && !self.half {
            16
        } else {
            32
        }
    }

    /// `4x8`, … as `COCO_GEMM` and the page's `gemm=` take it; `4x8h`, … in f16.
    pub fn parse(v: &str) -> Option<WideTile> {
        let (v, half) = v.strip_suffix('h').map_or((v, false), |v| (v, true));
        let (a, b) = v.split_once('x')?;
        let tile = WideTile::new(a.parse().ok()?, b.parse().ok()?);
        WideTile::ALL
            .contains(&tile)
            .then_some(WideTile { half, ..tile })
    }

    /// [`WideTile::parse`]'s spelling of this tile.
    pub fn name(self) -> String {
        let half = if self.half { "h" } else { "" };
        format!("{}x{}{half}", self.slots, self.tokens)
    }
}

/// Which portable GEMM prefill steps run (`kernels::matmul`): by default the first of
/// [`WideTile::ALL`] that keeps enough workgroups per product, else the 64 × 64 tiles.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GemmChoice {
    #[default]
    Auto,
    /// The 64 × 64 tile kernel everywhere, the wide GEMM's A/B baseline (`COCO_GEMM=tiled`,
    /// the page's `gemm=tiled`).
    Tiled,
    /// One wide tile everywhere (`COCO_GEMM=4x8`, `gemm=4x8`, …; `4x8h`, … in f16, where the
    /// device has shader-f16), in the precision named.
    Force(WideTile),
    /// The browser's int8 subgroup-matrix GEMM where Chromium grants it (the page's
    /// `gemm=matrix`; experimental and opt-in until it has run on a real GPU), `Auto`'s
    /// portable choice elsewhere and for weight types without int8 levels. Natively the same
    /// as `Auto`: wgpu's own cooperative matrices are `COCO_COOPMAT`'s.
    Matrix,
    /// The int8 tiles on dot4I8Packed alone (`MatmulVariant::Dot4I8`; the page's `gemm=dot4`,
    /// `COCO_GEMM=dot4`) where WGSL has `packed_4x8_integer_dot_product` and the weight type
    /// has int8 levels, `Auto`'s portable choice elsewhere. Natively only without the
    /// tensor-core tiles (`COCO_COOPMAT=0`). Opt-in: x' is rounded to one int8 level per
    /// element (llama.cpp's q8_1), 1.35× the f32 tiles' speed on an H100 but the HF goldens
    /// don't hold (BENCHMARKS.md "session 42").
    Dot4,
}

impl GemmChoice {
    /// "auto", "tiled", "matrix", "dot4", "4x8", "8x4" or "4x4" (f32), "4x8h", "8x4h" or "4x4h"
    /// (f16); `None` for anything else.
    pub fn parse(v: &str) -> Option<GemmChoice> {
        match v.trim() {
            "auto" => Some(GemmChoice::Auto),
            "tiled" => Some(GemmChoice::Tiled),
            "matrix" => Some(GemmChoice::Matrix),
            "dot4" => Some(GemmChoice::Dot4),
            v => WideTile::parse(v).map(GemmChoice::Force),
        }
    }

    /// [`GemmChoice::parse`]'s spelling of this choice.
    pub fn name(self) -> String {
        match self {
            GemmChoice::Auto => "auto".into(),
            GemmChoice::Tiled => "tiled".into(),
            GemmChoice::Matrix => "matrix".into(),
            GemmChoice::Dot4 => "dot4".into(),
            GemmChoice::Force(w) => w.name(),
        }
    }

    /// [`GemmChoice::parse`], or `Auto` with a warning naming what was expected.
    pub fn parse_or_warn(v: &str, source: &str) -> GemmChoice {
        GemmChoice::parse(v).unwrap_or_else(|| {
            log::warn!(
                "{source}={v:?} ignored: expected auto, tiled, matrix, dot4, 4x8, 8x4, 4x4, \
                 4x8h, 8x4h or 4x4h"
            );
            GemmChoice::Auto
        })
    }
}

/// What the caller wants from the device.
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceOptions {
    pub subgroups: SubgroupChoice,
    pub attention_merge: AttentionMerge,
    /// Decode batches the GPU loop keeps in flight, 1..=3 (`None`: 2; engine/decode.rs): the
    /// A/B knob `COCO_IN_FLIGHT`, a link's `in_flight`.
    pub batches_in_flight: Option<u32>,
    /// Anything but `Auto` also runs the tiles on a CPU adapter, which otherwise prefills
    /// with the matvec: so the page can put the tile kernels through the browser's compiler.
    pub gemm: GemmChoice,
    /// The single-pass attention's 2 × 2 score blocks and larger tiles
    /// (`kernels::attention::tiled_choice`): the A/B knob `COCO_ATTN_BLOCKED=1`, a link's
    /// `attn_blocked=1`. Off by default until timed.
    pub attention_blocked: bool,
}

impl DeviceOptions {
    /// The defaults, with `COCO_SUBGROUPS` (0 / 1) choosing subgroups, `COCO_ATTN_MERGE`
    /// (`separate`) the attention merge, `COCO_IN_FLIGHT` (1..=3) the decode batches in flight,
    /// `COCO_GEMM` the prefill GEMM and `COCO_ATTN_BLOCKED=1` the blocked attention scores
    /// (native A/B runs).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn from_env() -> Self {
        DeviceOptions {
            subgroups: std::env::var("COCO_SUBGROUPS")
                .map_or(SubgroupChoice::Auto, |v| SubgroupChoice::parse(&v)),
            attention_merge: std::env::var("COCO_ATTN_MERGE")
                .map_or(AttentionMerge::InSplit, |v| AttentionMerge::parse(&v)),
            batches_in_flight: std::env::var("COCO_IN_FLIGHT").ok().and_then(|v| {
                let n = v.trim().parse::<u32>().ok().filter(|n| (1..=3).contains(n));
                if n.is_none() {
                    log::warn!("COCO_IN_FLIGHT={v:?} ignored: expected 1, 2 or 3");
                }
                n
            }),
            gemm: std::env::var("COCO_GEMM").map_or(GemmChoice::Auto, |v| {
                GemmChoice::parse_or_warn(&v, "COCO_GEMM")
            }),
            attention_blocked: std::env::var("COCO_ATTN_BLOCKED").is_ok_and(|v| v == "1"),
        }
    }

    /// Whether to ask the device for subgroups at all.
    pub fn wants_subgroups(&self) -> bool {
        self.subgroups != SubgroupChoice::Off
    }
}

/// Whether the subgroup kernels run, and why, in words for the adapter report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubgroupDecision {
    pub used: bool,
    pub why: String,
}

impl SubgroupDecision {
    fn yes(why: String) -> Self {
        SubgroupDecision { used: true, why }
    }

    fn no(why: impl Into<String>) -> Self {
        SubgroupDecision {
            used: false,
            why: why.into(),
        }
    }

    /// A native device: wgpu requested SUBGROUP itself where the adapter offers it (auto
    /// uses them on software adapters too: lavapipe is where the tests check these kernels).
    pub fn native(options: DeviceOptions, offered: bool, sizes: (u32, u32)) -> Self {
        match (options.wants_subgroups(), offered) {
            (false, _) => Self::no(TURNED_OFF),
            (true, false) => Self::no("this adapter offers none"),
            (true, true) => Self::yes(format!(
                "offered by the adapter ({}–{} lanes)",
                sizes.0, sizes.1
            )),
        }
    }

    /// The browser: what `browser_features.js` recorded for coco's device (None: the request
    /// went around it), on a software adapter or not.
    pub fn browser(options: DeviceOptions, grant: Option<&BrowserGrant>, software: bool) -> Self {
        if !options.wants_subgroups() {
            return Self::no(TURNED_OFF);
        }
        let Some(g) = grant else {
            return Self::no("not yet: coco's feature request did not reach the browser");
        };
        if !g.offered {
            return Self::no("this browser's adapter offers none");
        }
        if !g.granted {
            return Self::no("offered, but the browser opened the device without them");
        }
        if !g.subgroup_id {
            return Self::no(
                "not yet: granted, but this browser's WGSL has no subgroup_id / num_subgroups \
                 builtins, which coco's subgroup kernels use",
            );
        }
        // The kernels keep one partial sum per subgroup of a 256-invocation workgroup in
        // 64-entry arrays; WebGPU promises at least 4 lanes, this checks it.
        if g.min_size < 4 {
            return Self::no(format!(
                "subgroups of {} lanes: coco's kernels need at least 4",
                g.min_size
            ));
        }
        if software && options.subgroups == SubgroupChoice::Auto {
            return Self::no(format!(
                "granted ({}–{} lanes), but on this software adapter the subgroup kernels are \
                 slower than workgroup reductions (subgroups=1 in a link forces them)",
                g.min_size, g.max_size
            ));
        }
        Self::yes(format!(
            "granted by the browser, requested by coco itself since wgpu can't ({}–{} lanes)",
            g.min_size, g.max_size
        ))
    }
}

const TURNED_OFF: &str = "turned off: workgroup reductions everywhere (an A/B switch)";

/// What the browser said about `subgroups` for coco's device (`browser_features.js`),
/// whether its WGSL has the packed 4×8-bit integer dot product, and its adapter's offer of
/// Chromium's experimental subgroup matrices.
#[derive(Clone, Debug, Default, serde::Deserialize)]
pub struct BrowserGrant {
    pub offered: bool,
    pub granted: bool,
    pub subgroup_id: bool,
    pub min_size: u32,
    pub max_size: u32,
    #[serde(default)]
    pub packed_4x8: bool,
    /// `chromium-experimental-subgroup-matrix` is among the adapter's features.
    #[serde(default)]
    pub matrix_offered: bool,
    /// `GPUAdapterInfo.subgroupMatrixConfigs`.
    #[serde(default)]
    pub matrix_configs: Vec<MatrixConfig>,
    /// The device was granted `chromium-experimental-subgroup-matrix` (coco asks for it
    /// where the adapter offers the int8 configuration its GEMM multiplies).
    #[serde(default)]
    pub matrix_granted: bool,
}

/// One of `GPUAdapterInfo.subgroupMatrixConfigs`: an M×N×K product of `component` operands
/// with `result` accumulators.
#[derive(Clone, Debug, Default, serde::Deserialize)]
pub struct MatrixConfig {
    pub component: String,
    pub result: String,
    pub m: u32,
    pub n: u32,
    pub k: u32,
}

/// The subgroup-matrix product coco's browser GEMM multiplies (`gemm_matrix_i8.wgsl`): 16
/// slots × 16 tokens × 32 of K, int8 operands, i32 sums, on subgroups of exactly 32 (its
/// 256 invocations are 8 subgroups with fixed blocks).
pub const INT8_MATRIX: (u32, u32, u32) = (16, 16, 32);

impl BrowserGrant {
    /// Whether the device holds what the int8 subgroup-matrix GEMM needs (once asked for
    /// with `gemm=matrix`): the feature
    /// granted with an [`INT8_MATRIX`] i8 → i32 configuration, subgroups of exactly 32, and
    /// WGSL's `pack4xI8` (it stages x' as the int8 matvec does).
    pub fn int8_matrix(&self) -> bool {
        self.matrix_granted
            && self.packed_4x8
            && (self.min_size, self.max_size) == (32, 32)
            && self
                .matrix_configs
                .iter()
                .any(|c| (c.m, c.n, c.k) == INT8_MATRIX && c.component == "i8" && c.result == "i32")
    }

    /// The adapter's subgroup-matrix offer in the words of the native report
    /// (`describe_cooperative_matrix`), and whether coco's prefill uses it (`used`: the
    /// int8 GEMM runs; `asked`: a link said `gemm=matrix`); where every configuration takes
    /// f16 and the device has no `shader-f16` (`f16`), that none could be declared here at
    /// all (WGSL's f16 needs `enable f16;`).
    pub fn describe_matrices(&self, f16: bool, asked: bool, used: bool) -> String {
        if !self.matrix_offered {
            return "chromium-experimental-subgroup-matrix not offered".into();
        }
        let configs: Vec<String> = self
            .matrix_configs
            .iter()
            .map(|c| format!("{}x{}x{} {}->{}", c.m, c.n, c.k, c.component, c.result))
            .collect();
        let needs_f16 = |c: &MatrixConfig| c.component == "f16" || c.result == "f16";
        let why =
            if !f16 && !self.matrix_configs.is_empty() && self.matrix_configs.iter().all(needs_f16)
            {
                "none usable here: every configuration takes f16 and this device has no shader-f16"
            } else if used {
                "used (experimental, gemm=matrix): the prefill GEMM multiplies int8 levels \
                 16x16x32 where the weight type has them (Q4_0, Q5_0, Q8_0, Q4_K), the portable \
                 tiles elsewhere"
            } else if !asked {
                "not used by default: coco's int8 GEMM on them is correct on an H100 in Chromium \
                 but no faster than the portable tiles there (pp128 of Gemma-3-270M, 13,197 \
                 against 13,778 tok/s); gemm=matrix in a link runs it"
            } else if self.int8_matrix() {
                "granted, not used: the subgroup kernels are off or the workgroup memory is short"
            } else {
                "asked for, not usable: coco's int8 GEMM needs 16x16x32 i8->i32 on subgroups of \
                 32 and pack4xI8, granted; prefill runs the portable tiles"
            };
        format!(
            "chromium-experimental-subgroup-matrix offered | {} configuration(s){}{} | {why}",
            configs.len(),
            if configs.is_empty() { "" } else { ": " },
            configs.join(", ")
        )
    }
}

/// Whether this process's WGSL compiler takes `dot4I8Packed` and `pack4xI8` (WGSL's
/// `packed_4x8_integer_dot_product`), which the chunk matvec's int8 levels need. naga always
/// does; a browser says so in `navigator.gpu.wgslLanguageFeatures`, read when coco's device
/// opens (one device per page, so one answer per process).
static PACKED_4X8_DOT: AtomicBool = AtomicBool::new(cfg!(not(target_arch = "wasm32")));

/// See `PACKED_4X8_DOT`.
pub fn packed_4x8_dot() -> bool {
    PACKED_4X8_DOT.load(Ordering::Relaxed)
}

/// Records what the browser's WGSL offers (see [`PACKED_4X8_DOT`]).
#[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
pub(crate) fn set_packed_4x8_dot(available: bool) {
    PACKED_4X8_DOT.store(available, Ordering::Relaxed)
}

#[cfg(target_arch = "wasm32")]
pub(crate) mod browser {
    use wasm_bindgen::prelude::*;

    #[wasm_bindgen(module = "/src/gpu/browser_features.js")]
    extern "C" {
        #[wasm_bindgen(js_name = askForSubgroups)]
        fn ask_for_subgroups_js(label: &str, matrices: bool);
        #[wasm_bindgen(js_name = granted)]
        fn granted_js(label: &str) -> JsValue;
    }

    /// Registers `label` so the browser's requestDevice call with it asks for `subgroups`,
    /// and with `matrices` (a link's `gemm=matrix`) for Chromium's subgroup matrices too.
    pub fn ask_for_subgroups(label: &str, matrices: bool) {
        ask_for_subgroups_js(label, matrices)
    }

    /// What the browser granted the device labelled `label` (None when it never asked).
    pub fn granted(label: &str) -> Option<super::BrowserGrant> {
        let value = granted_js(label);
        if value.is_undefined() || value.is_null() {
            return None;
        }
        serde_wasm_bindgen::from_value(value).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> BrowserGrant {
        BrowserGrant {
            offered: true,
            granted: true,
            subgroup_id: true,
            min_size: 32,
            max_size: 32,
            packed_4x8: true,
            ..BrowserGrant::default()
        }
    }

    /// The subgroup-matrix offer as the capability report words it, from the JSON
    /// browser_features.js records.
    #[test]
    fn a_grant_describes_its_subgroup_matrices() {
        let grant: BrowserGrant = serde_json::from_str(
            r#"{"offered":true,"granted":true,"subgroup_id":true,"min_size":32,"max_size":32,
                "matrix_offered":true,"matrix_configs":[
                  {"component":"f16","result":"f32","m":8,"n":8,"k":8},
                  {"component":"i8","result":"i32","m":8,"n":8,"k":32}]}"#,
        )
        .expect("grant");
        for f16 in [false, true] {
            let text = grant.describe_matrices(f16, false, false);
            assert!(
                text.contains("offered | 2 configuration(s): 8x8x8 f16->f32, 8x8x32 i8->i32"),
                "{text}"
            );
            assert!(text.contains("not used by default"), "{text}");
            let asked = grant.describe_matrices(f16, true, false);
            assert!(asked.contains("asked for, not usable"), "{asked}");
        }
        assert_eq!(
            full().describe_matrices(false, false, false),
            "chromium-experimental-subgroup-matrix not offered"
        );
        // Only f16 configurations, no shader-f16: none could be declared.
        let f16_only: BrowserGrant = serde_json::from_str(
            r#"{"offered":true,"granted":true,"subgroup_id":true,"min_size":32,"max_size":32,
                "matrix_offered":true,"matrix_configs":[
                  {"component":"f16","result":"f32","m":16,"n":16,"k":16},
                  {"component":"f16","result":"f16","m":16,"n":16,"k":16}]}"#,
        )
        .expect("grant");
        assert!(
            f16_only.describe_matrices(false, true, false).ends_with(
                "none usable here: every configuration takes f16 and this device has no shader-f16"
            ),
            "{}",
            f16_only.describe_matrices(false, true, false)
        );
        assert!(!f16_only.int8_matrix());
    }

    /// Chromium's NVIDIA offer (session 37): the int8 GEMM runs only with the feature
    /// granted, the 16x16x32 i8 configuration and subgroups of exactly 32.
    #[test]
    fn the_int8_gemm_needs_its_configuration_granted() {
        let nvidia = r#"{"offered":true,"granted":true,"subgroup_id":true,"min_size":32,
            "max_size":32,"packed_4x8":true,"matrix_offered":true,"matrix_granted":true,"matrix_configs":[
              {"component":"u8","result":"u32","m":16,"n":16,"k":32},
              {"component":"i8","result":"i32","m":16,"n":16,"k":32},
              {"component":"u8","result":"u32","m":16,"n":8,"k":32},
              {"component":"i8","result":"i32","m":16,"n":8,"k":32}]}"#;
        let grant: BrowserGrant = serde_json::from_str(nvidia).expect("grant");
        assert!(grant.int8_matrix());
        assert!(grant
            .describe_matrices(false, true, true)
            .contains("used (experimental, gemm=matrix)"));
        assert!(grant
            .describe_matrices(false, true, false)
            .contains("granted, not used"));
        assert!(grant
            .describe_matrices(false, false, false)
            .contains("not used by default"));
        let not_granted = BrowserGrant {
            matrix_granted: false,
            ..grant.clone()
        };
        assert!(!not_granted.int8_matrix());
        let wide_subgroups = BrowserGrant {
            min_size: 16,
            max_size: 64,
            ..grant.clone()
        };
        assert!(!wide_subgroups.int8_matrix());
        let only_narrow = BrowserGrant {
            matrix_configs: grant.matrix_configs[2..].to_vec(),
            ..grant
        };
        assert!(!only_narrow.int8_matrix());
    }

    /// A grant from a page that predates the field (or a browser without the list) reads as
    /// no packed dot product: the f32 matvec, never a shader the compiler may reject.
    #[test]
    fn a_grant_without_packed_4x8_means_none() {
        let grant: BrowserGrant = serde_json::from_str(
            r#"{"offered":true,"granted":true,"subgroup_id":true,"min_size":32,"max_size":32}"#,
        )
        .expect("grant");
        assert!(!grant.packed_4x8);
    }

    #[test]
    fn browser_subgroups_need_the_grant_and_the_builtins() {
        let on = DeviceOptions::default();
        assert!(SubgroupDecision::browser(on, Some(&full()), false).used);
        let off = DeviceOptions {
            subgroups: SubgroupChoice::Off,
            ..DeviceOptions::default()
        };
        assert!(!SubgroupDecision::browser(off, Some(&full()), false).used);
        assert!(!SubgroupDecision::browser(on, None, false).used);
        for broken in [
            BrowserGrant {
                offered: false,
                granted: false,
                ..full()
            },
            BrowserGrant {
                granted: false,
                ..full()
            },
            BrowserGrant {
                subgroup_id: false,
                ..full()
            },
            BrowserGrant {
                min_size: 2,
                max_size: 2,
                ..full()
            },
        ] {
            let d = SubgroupDecision::browser(on, Some(&broken), false);
            assert!(!d.used, "{broken:?} -> {d:?}");
        }
        let swiftshader = BrowserGrant {
            min_size: 4,
            max_size: 4,
            ..full()
        };
        // SwiftShader: auto keeps the workgroup kernels, a forced choice uses subgroups.
        assert!(!SubgroupDecision::browser(on, Some(&swiftshader), true).used);
        let forced = DeviceOptions {
            subgroups: SubgroupChoice::On,
            ..DeviceOptions::default()
        };
        assert!(SubgroupDecision::browser(forced, Some(&swiftshader), true).used);
    }

    #[test]
    fn native_subgroups_follow_the_adapter_and_the_switch() {
        let on = DeviceOptions::default();
        assert!(SubgroupDecision::native(on, true, (32, 32)).used);
        assert!(!SubgroupDecision::native(on, false, (0, 0)).used);
        let off = DeviceOptions {
            subgroups: SubgroupChoice::Off,
            ..DeviceOptions::default()
        };
        assert!(!SubgroupDecision::native(off, true, (32, 32)).used);
        assert_eq!(SubgroupChoice::parse("0"), SubgroupChoice::Off);
        assert_eq!(SubgroupChoice::parse(" 1"), SubgroupChoice::On);
        assert_eq!(SubgroupChoice::parse("auto"), SubgroupChoice::Auto);
    }
}
