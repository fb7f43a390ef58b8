//! GGML tensor types as GGUF stores them: ids, block geometry, names.
//!
//! Block layouts follow ggml's `ggml-common.h` (the `block_q4_0` … `block_q6_K` structs).

/// A tensor's element type. Discriminants are the GGUF `ggml_type` ids.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    BF16,
    /// 32 elements on the fixed non-linear 16-level grid (llama.cpp's `kvalues_iq4nl`).
    IQ4_NL,
    /// 256-element super-blocks of the IQ4_NL grid with 6-bit sub-block scales.
    IQ4_XS,
    /// A type id GGUF defines that coco cannot read (IQ*, TQ*, I8 …); kept so the
    /// capability report can name it instead of failing the parse.
    Other(u32),
}

impl GgmlType {
    pub fn from_id(id: u32) -> GgmlType {
        match id {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            9 => Self::Q8_1,
            10 => Self::Q2_K,
            11 => Self::Q3_K,
            12 => Self::Q4_K,
            13 => Self::Q5_K,
            14 => Self::Q6_K,
            15 => Self::Q8_K,
            20 => Self::IQ4_NL,
            23 => Self::IQ4_XS,
            30 => Self::BF16,
            other => Self::Other(other),
        }
    }

    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q8_1 => 9,
            Self::Q2_K => 10,
            Self::Q3_K => 11,
            Self::Q4_K => 12,
            Self::Q5_K => 13,
            Self::Q6_K => 14,
            Self::Q8_K => 15,
            Self::BF16 => 30,
            Self::IQ4_NL => 20,
            Self::IQ4_XS => 23,
            Self::Other(id) => id,
        }
    }

    /// (elements per block, bytes per block); `None` for ids whose layout we don't know,
    /// which means the file's data size can't be computed and the tensor can't be read.
    pub fn block_geometry(self) -> Option<(usize, usize)> {
        Some(match self {
            Self::F32 => (1, 4),
            Self::F16 | Self::BF16 => (1, 2),
            Self::Q4_0 => (32, 18),
            Self::Q4_1 => (32, 20),
            Self::Q5_0 => (32, 22),
            Self::Q5_1 => (32, 24),
            Self::Q8_0 => (32, 34),
            Self::Q8_1 => (32, 36),
            Self::Q2_K => (256, 84),
            Self::Q3_K => (256, 110),
            Self::Q4_K => (256, 144),
            Self::Q5_K => (256, 176),
            Self::Q6_K => (256, 210),
            Self::Q8_K => (256, 292),
            Self::IQ4_NL => (32, 18),
            Self::IQ4_XS => (256, 136),
            // Types coco can't run but must still size, so a file that uses them parses and
            // the capability check can say "not yet: IQ2_XS" instead of a parse error.
            // Sizes from ggml's block structs.
            Self::Other(id) => match id {
                16 => (256, 66),  // IQ2_XXS
                17 => (256, 74),  // IQ2_XS
                18 => (256, 98),  // IQ3_XXS
                19 => (256, 50),  // IQ1_S
                21 => (256, 110), // IQ3_S
                22 => (256, 82),  // IQ2_S
                24 => (1, 1),     // I8
                25 => (1, 2),     // I16
                26 => (1, 4),     // I32
                27 => (1, 8),     // I64
                28 => (1, 8),     // F64
                29 => (256, 56),  // IQ1_M
                34 => (256, 54),  // TQ1_0
                35 => (256, 66),  // TQ2_0
                39 => (32, 17),   // MXFP4
                _ => return None,
            },
        })
    }

    /// Types coco's kernels read directly on the GPU.
    pub fn is_supported(self) -> bool {
        Self::SUPPORTED.contains(&self)
    }

    pub const SUPPORTED: [GgmlType; 15] = [
        Self::F32,
        Self::F16,
        Self::BF16,
        Self::Q8_0,
        Self::Q4_0,
        Self::Q4_1,
        Self::Q5_0,
        Self::Q5_1,
        Self::IQ4_NL,
        Self::Q2_K,
        Self::Q3_K,
        Self::Q4_K,
        Self::Q5_K,
        Self::Q6_K,
        Self::IQ4_XS,
    ];

    /// 256-element super-block types (K must be a multiple of 256); the rest read by the GPU
    /// hold 32-element blocks or single values.
    pub fn is_super_block(self) -> bool {
        self.block_geometry().is_some_and(|(n, _)| n == 256)
    }

    pub fn name(self) -> String {
        match self {
            Self::Other(id) => match id {
                16 => "IQ2_XXS".into(),
                17 => "IQ2_XS".into(),
                18 => "IQ3_XXS".into(),
                19 => "IQ1_S".into(),
                21 => "IQ3_S".into(),
                22 => "IQ2_S".into(),
                24 => "I8".into(),
                25 => "I16".into(),
                26 => "I32".into(),
                27 => "I64".into(),
                28 => "F64".into(),
                29 => "IQ1_M".into(),
                34 => "TQ1_0".into(),
                35 => "TQ2_0".into(),
                39 => "MXFP4".into(),
                _ => format!("type#{id}"),
            },
            other => format!("{other:?}"),
        }
    }

    /// Bytes taken by `n_elements` of this type, or `None` on a partial block / overflow.
    pub fn bytes_for(self, n_elements: u64) -> Option<u64> {
        let (block_len, block_bytes) = self.block_geometry()?;
        if !n_elements.is_multiple_of(block_len as u64) {
            return None;
        }
        (n_elements / block_len as u64).checked_mul(block_bytes as u64)
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name())
    }
}
