//! Writes the WGSL of the page's subgroup matvecs, as the browser's compiler gets it, into a
//! folder: every fusion and x'-levels form of the chunk matvec (one token per workgroup and
//! four) and the lane-per-8 matvec, for one type of each dequantizer family.
//! tests/e2e/subgroup_wgsl.test.mjs compiles them in Chromium: CI's SwiftShader adapter offers
//! subgroups, but the page runs no subgroup kernel on a software adapter, so nothing else
//! puts them through Tint (whose uniformity analysis naga does not have).
//!
//! cargo run --release --example subgroup_wgsl -- <folder>

use coco::gguf::GgmlType;
use coco::kernels::elementwise::Activation;
use coco::kernels::matmul::{
    has_int8_dot, DeviceKernels, Fusion, MatmulKey, MatmulVariant, XLevels,
};
use coco::kernels::rope::RopeLayout;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::path::PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: subgroup_wgsl <folder>")?,
    );
    std::fs::create_dir_all(&dir)?;
    let glu = Fusion::Glu(Activation::Silu);
    let rope = |qk_norm| Fusion::QkvRope {
        layout: RopeLayout::Neox,
        qk_norm,
    };
    let mut written = 0;
    for ty in [
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_XS,
    ] {
        let key = |variant, fusion, norm, levels, tokens, splits| MatmulKey {
            fusion,
            norm,
            levels,
            tokens,
            splits,
            ..MatmulKey::choose(
                DeviceKernels::with_matvec(variant),
                ty,
                1,
                false,
                Some(variant),
            )
        };
        let chunk = MatmulVariant::MatvecChunk;
        let mut keys = vec![
            key(
                MatmulVariant::MatvecSubgroup,
                Fusion::None,
                true,
                XLevels::Staged,
                1,
                1,
            ),
            key(
                MatmulVariant::MatvecSubgroup,
                Fusion::PostNorm,
                false,
                XLevels::Staged,
                1,
                1,
            ),
            key(chunk, Fusion::PostNorm, false, XLevels::Staged, 1, 1),
            key(chunk, rope(true), true, XLevels::Staged, 1, 1),
            key(chunk, Fusion::None, true, XLevels::Staged, 1, 3),
        ];
        for tokens in [1, 4] {
            keys.push(key(chunk, Fusion::None, true, XLevels::Staged, tokens, 1));
            keys.push(key(chunk, glu, true, XLevels::Staged, tokens, 1));
            keys.push(key(chunk, rope(false), true, XLevels::Staged, tokens, 1));
            if has_int8_dot(ty) {
                let wide = MatmulVariant::MatvecChunkWide(64);
                keys.push(key(wide, glu, true, XLevels::Emit, tokens, 1));
                keys.push(key(chunk, Fusion::None, false, XLevels::Read, tokens, 1));
            }
        }
        for k in keys {
            // WebGPU's guaranteed 16 KiB of workgroup memory, as the page plans for.
            let k = k.staged(4096, 16 * 1024);
            std::fs::write(dir.join(format!("{}.wgsl", k.label())), k.browser_source()?)?;
            written += 1;
        }
    }
    println!("{written} kernels in {}", dir.display());
    Ok(())
}
