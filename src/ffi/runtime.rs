//! What runs underneath: the GEMM library and its kernels, the element-wise
//! kernels' instruction set, the thread count.

use super::prelude::{ag_context, ag_status, guard, write_out};
use std::ffi::c_char;

/// Bytes of each text field of ag_runtime, the terminating NUL included.
pub const AG_RUNTIME_TEXT: usize = 64;

/// What ag_runtime_info reports. Each text field is a NUL-terminated
/// string, cut to fit AG_RUNTIME_TEXT bytes.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ag_runtime {
    /// The GEMM library: "OpenBLAS", "MKL", "Accelerate", or "naive"
    /// (under Miri).
    pub gemm_library: [c_char; AG_RUNTIME_TEXT],
    /// Its version ("0.3.21"), empty if it does not report one.
    pub gemm_version: [c_char; AG_RUNTIME_TEXT],
    /// Its kernel family in use ("SkylakeX"), empty if it does not say.
    pub gemm_kernels: [c_char; AG_RUNTIME_TEXT],
    /// Why these kernels, in a few words (e.g. "switched from Prescott (CPU
    /// has AVX-512)", or, when they are below the CPU and cannot be
    /// switched, the OPENBLAS_CORETYPE value to set).
    pub gemm_note: [c_char; AG_RUNTIME_TEXT],
    /// The element-wise kernels' instruction set: "AVX-512", "AVX2+FMA" or
    /// "baseline".
    pub simd: [c_char; AG_RUNTIME_TEXT],
    /// The widest vector instruction set the CPU supports ("AVX-512",
    /// "AVX2", "AVX", "SSE").
    pub cpu_isa: [c_char; AG_RUNTIME_TEXT],
    /// Threads the context's kernels run on: 2 (the caller and one worker),
    /// or 1 when AG_NUM_THREADS=1 or the worker could not start.
    pub threads: u32,
}

impl Default for ag_runtime {
    fn default() -> Self {
        let empty = [0; AG_RUNTIME_TEXT];
        ag_runtime {
            gemm_library: empty,
            gemm_version: empty,
            gemm_kernels: empty,
            gemm_note: empty,
            simd: empty,
            cpu_isa: empty,
            threads: 0,
        }
    }
}

fn text(s: &str) -> [c_char; AG_RUNTIME_TEXT] {
    let mut out = [0 as c_char; AG_RUNTIME_TEXT];
    // Cut at a character boundary, leaving room for the NUL.
    let mut end = s.len().min(AG_RUNTIME_TEXT - 1);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    for (o, &b) in out.iter_mut().zip(&s.as_bytes()[..end]) {
        *o = b as c_char;
    }
    out
}

/// Writes what runs underneath this context to `*out`: the GEMM library,
/// its version and kernel family, the element-wise kernels' instruction
/// set and the thread count. The GEMM's kernels are settled by the first
/// context of the process: Intel MKL runs them where it is installed on an
/// Intel CPU (AG_GEMM=openblas or mkl forces a library; OPENBLAS_CORETYPE
/// or AG_BLAS_CORE set means OpenBLAS); a DYNAMIC_ARCH OpenBLAS that picked
/// kernels below what the CPU supports is switched to the CPU's family,
/// unless the user set OPENBLAS_CORETYPE (honoured) or AG_BLAS_CORE
/// (`asis`, or a family).
/// Errors: NULL_ARGUMENT (out).
#[unsafe(no_mangle)]
pub extern "C" fn ag_runtime_info(ctx: *mut ag_context, out: *mut ag_runtime) -> ag_status {
    guard("ag_runtime_info", ctx, |c| {
        let g = crate::blas::gemm_info();
        let info = ag_runtime {
            gemm_library: text(&g.library),
            gemm_version: text(&g.version),
            gemm_kernels: text(&g.kernels),
            gemm_note: text(&g.note),
            simd: text(crate::simd::detected().name()),
            cpu_isa: text(g.cpu_isa),
            threads: c.threads(),
        };
        write_out("ag_runtime_info", "out", out, info)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_to_fit_with_its_nul() {
        let t = text("OpenBLAS");
        assert_eq!(
            t[..8].iter().map(|&c| c as u8).collect::<Vec<_>>(),
            b"OpenBLAS"
        );
        assert_eq!(t[8], 0);
        let long = "é".repeat(AG_RUNTIME_TEXT);
        let t = text(&long);
        assert_eq!(t[AG_RUNTIME_TEXT - 1], 0);
        // 63 bytes hold 31 two-byte characters; the 32nd is not cut in half.
        assert_eq!(t[62], 0);
    }
}
