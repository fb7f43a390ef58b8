// The cooperative-matrix block (CB × CB × CB, f16 × f16 → f32) and the subgroup size it goes
// with (GpuContext::coop_block): 16 on subgroups of 32 (tensor cores), or with COOP8 8 on
// subgroups of 8 (lavapipe, so the tests run the tensor-core kernels on a CPU). Either way a
// block holds 8 values per lane, and a 256-invocation workgroup has NSG subgroups
// (NSG · CB² = 2,048 in both); the kernels deal their tiles' blocks by CB and NSG, so both
// run the same code. Included by matmul/coop_staging.wgsl and attention_coop.wgsl.
#ifdef COOP8
const CB: u32 = 8u;
const SGS: u32 = 8u;
alias CoopA = coop_mat8x8<f16, A>;
alias CoopB = coop_mat8x8<f16, B>;
alias CoopC = coop_mat8x8<f32, C>;
#else
const CB: u32 = 16u;
const SGS: u32 = 32u;
alias CoopA = coop_mat16x16<f16, A>;
alias CoopB = coop_mat16x16<f16, B>;
alias CoopC = coop_mat16x16<f32, C>;
#endif
const NSG: u32 = 256u / SGS;
