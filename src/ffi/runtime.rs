//! What runs underneath: the GEMM library and its kernels, the element-wise
//! kernels' instruction set, the thread count.

use super::prelude::{
    AG_STATUS_INVALID_ARGUMENT, AG_STATUS_NULL_ARGUMENT, AG_STATUS_OK, ag_context, ag_status,
    guard, write_out,
};
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
    /// Threads the context's kernels run on, the caller included: the
    /// process's count (see ag_thread_info_get).
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

/// ag_thread_info_get's `source`: the default, every physical core.
pub const AG_THREADS_FROM_CORES: u32 = 0;
/// ag_thread_info_get's `source`: the default, bounded by the affinity mask.
pub const AG_THREADS_FROM_AFFINITY: u32 = 1;
/// ag_thread_info_get's `source`: the default, bounded by a cgroup CPU quota.
pub const AG_THREADS_FROM_CGROUP: u32 = 2;
/// ag_thread_info_get's `source`: the AG_NUM_THREADS environment variable.
pub const AG_THREADS_FROM_ENVIRONMENT: u32 = 3;
/// ag_thread_info_get's `source`: ag_set_num_threads.
pub const AG_THREADS_FROM_CALL: u32 = 4;
/// The most threads ag_set_num_threads accepts.
pub const AG_MAX_THREADS: usize = 1024;

/// What ag_thread_info_get reports. The caller sets `size` to
/// `sizeof(ag_thread_info)` before the call; fields added later go at the
/// end, and an older caller's smaller struct gets only what it has room for.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct ag_thread_info {
    /// Set by the caller: sizeof(ag_thread_info).
    pub size: u32,
    /// Threads a parallel kernel uses, the calling thread included.
    pub threads: u32,
    /// The default: the physical cores this process may use (its affinity
    /// mask and cgroup CPU quota bound it; hyperthread siblings count once).
    pub default_threads: u32,
    /// What decided `threads`: one of the AG_THREADS_FROM_ constants.
    pub source: u32,
}

/// Sets how many threads the library computes on, for the whole process
/// (one pool serves every context), the calling thread included; 0 goes
/// back to AG_NUM_THREADS or, without it, the default (the physical cores
/// the process may use). More than the machine has is allowed (said once
/// on stderr). A change takes effect at the next parallel kernel that finds
/// the pool idle, never inside one, so it may be called at any time, from
/// any thread, even while other threads' contexts run a step. The results
/// of every op are the same bits at any thread count. Several contexts
/// stepping at once on their own host threads share the pool: a kernel
/// that finds it busy runs on its own caller's thread.
/// Errors: INVALID_ARGUMENT (n above AG_MAX_THREADS; nothing changes).
#[unsafe(no_mangle)]
pub extern "C" fn ag_set_num_threads(n: usize) -> ag_status {
    if n > AG_MAX_THREADS {
        return AG_STATUS_INVALID_ARGUMENT;
    }
    crate::pool::set_threads(n);
    AG_STATUS_OK
}

/// Writes the process's thread count, its default and what decided it to
/// `*out`, whose `size` the caller set to sizeof(ag_thread_info) (at least
/// the size of the first two fields).
/// Errors: NULL_ARGUMENT (out), INVALID_ARGUMENT (out->size too small;
/// nothing written).
#[unsafe(no_mangle)]
pub extern "C" fn ag_thread_info_get(out: *mut ag_thread_info) -> ag_status {
    use crate::pool::ThreadSource;
    if out.is_null() {
        return AG_STATUS_NULL_ARGUMENT;
    }
    // SAFETY: `out` is non-null and, by the contract, points to a struct
    // whose first field (u32, the same in every version) the caller set.
    let size = unsafe { std::ptr::addr_of!((*out).size).read_unaligned() } as usize;
    if size < 8 {
        return AG_STATUS_INVALID_ARGUMENT;
    }
    let t = crate::pool::thread_info();
    let info = ag_thread_info {
        size: size.min(std::mem::size_of::<ag_thread_info>()) as u32,
        threads: t.threads as u32,
        default_threads: t.default as u32,
        source: match t.source {
            ThreadSource::Cores => AG_THREADS_FROM_CORES,
            ThreadSource::Affinity => AG_THREADS_FROM_AFFINITY,
            ThreadSource::Cgroup => AG_THREADS_FROM_CGROUP,
            ThreadSource::Environment => AG_THREADS_FROM_ENVIRONMENT,
            ThreadSource::Call => AG_THREADS_FROM_CALL,
        },
    };
    let n = size.min(std::mem::size_of::<ag_thread_info>());
    // SAFETY: the caller's struct holds `size` bytes (its contract) and
    // `n <= size`; a byte copy needs no alignment.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (&info as *const ag_thread_info).cast::<u8>(),
            out.cast::<u8>(),
            n,
        )
    };
    AG_STATUS_OK
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

    #[test]
    fn the_headers_limit_is_the_pools() {
        assert_eq!(AG_MAX_THREADS, crate::pool::MAX_THREADS);
    }

    #[test]
    fn thread_info_honours_the_callers_size() {
        let mut whole = ag_thread_info {
            size: std::mem::size_of::<ag_thread_info>() as u32,
            ..Default::default()
        };
        assert_eq!(ag_thread_info_get(&mut whole), AG_STATUS_OK);
        assert!(whole.threads >= 1 && whole.default_threads >= 1);
        // An older caller's two-field struct: the rest is left alone.
        let mut short = [8u32, 0, 0xAAAA, 0xBBBB];
        let st = ag_thread_info_get(short.as_mut_ptr().cast());
        assert_eq!(st, AG_STATUS_OK);
        assert_eq!(short[0], 8);
        assert!(short[1] >= 1);
        assert_eq!(&short[2..], &[0xAAAA, 0xBBBB]);
        let mut tiny = ag_thread_info {
            size: 4,
            ..Default::default()
        };
        assert_eq!(ag_thread_info_get(&mut tiny), AG_STATUS_INVALID_ARGUMENT);
        assert_eq!(tiny.threads, 0);
        assert_eq!(
            ag_thread_info_get(std::ptr::null_mut()),
            AG_STATUS_NULL_ARGUMENT
        );
        assert_eq!(
            ag_set_num_threads(AG_MAX_THREADS + 1),
            AG_STATUS_INVALID_ARGUMENT
        );
    }
}
