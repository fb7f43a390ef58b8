//! Writes the WGSL of the page's subgroup matvecs, as the browser's compiler gets it, into a
//! folder: `subgroup_matvec_forms` (every fusion, split and x'-levels form of the chunk
//! matvec, and the lane-per-8 matvec) for one type of each dequantizer family.
//! tests/e2e/subgroup_wgsl.test.mjs compiles them in Chromium: CI's SwiftShader adapter offers
//! subgroups, but the page runs no subgroup kernel on a software adapter, so nothing else
//! puts them through Tint (whose uniformity analysis naga does not have).
//!
//! cargo run --release --example subgroup_wgsl -- <folder>

use coco::gguf::GgmlType;
use coco::kernels::matmul::subgroup_matvec_forms;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::path::PathBuf::from(
        std::env::args()
            .nth(1)
            .ok_or("usage: subgroup_wgsl <folder>")?,
    );
    std::fs::create_dir_all(&dir)?;
    let mut written = 0;
    for ty in [
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::IQ4_XS,
    ] {
        for key in subgroup_matvec_forms(ty) {
            std::fs::write(
                dir.join(format!("{}.wgsl", key.label())),
                key.browser_source()?,
            )?;
            written += 1;
        }
    }
    println!("{written} kernels in {}", dir.display());
    Ok(())
}
