//! Intel MKL's `cblas_sgemm`, loaded at run time when the loader finds
//! `libmkl_rt` (`make deps` installs it on Intel CPUs). Nothing links
//! against it: a build is the same with or without MKL, and a machine
//! without it runs OpenBLAS.
//!
//! MKL runs sequential (arenagrad splits large products over its own
//! threads, as it does with OpenBLAS) and with 32-bit integers; both are
//! set before MKL's first call, as its runtime layer requires. MKL's sums
//! for a row of C do not depend on how many rows the call has (tested), so
//! one thread still gives the bits of two.

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::OnceLock;

/// `cblas_sgemm` with 32-bit integers (MKL's LP64 interface).
pub(super) type SgemmFn = unsafe extern "C" fn(
    layout: c_int,
    trans_a: c_int,
    trans_b: c_int,
    m: c_int,
    n: c_int,
    k: c_int,
    alpha: f32,
    a: *const f32,
    lda: c_int,
    b: *const f32,
    ldb: c_int,
    beta: f32,
    c: *mut f32,
    ldc: c_int,
);

/// MKL once loaded: its sgemm and version.
pub(super) struct Mkl {
    pub sgemm: SgemmFn,
    pub version: String,
}

static LOADED: OnceLock<Option<Mkl>> = OnceLock::new();

/// The MKL runtime library names tried, newest first.
const NAMES: [&CStr; 3] = [c"libmkl_rt.so.3", c"libmkl_rt.so.2", c"libmkl_rt.so"];

/// MKL, loaded on the first call; None if the loader does not find it or
/// it lacks what arenagrad calls.
pub(super) fn load() -> Option<&'static Mkl> {
    LOADED.get_or_init(open).as_ref()
}

fn open() -> Option<Mkl> {
    for name in NAMES {
        // SAFETY: a NUL-terminated name; the handle is kept for the life
        // of the process (never dlclosed), so the symbols stay valid.
        let h = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            continue;
        }
        // SAFETY: a live handle and C strings.
        let sym = |s: &CStr| unsafe { libc::dlsym(h, s.as_ptr()) };
        let (threading, interface, sgemm) = (
            sym(c"MKL_Set_Threading_Layer"),
            sym(c"MKL_Set_Interface_Layer"),
            sym(c"cblas_sgemm"),
        );
        if threading.is_null() || interface.is_null() || sgemm.is_null() {
            continue;
        }
        // SAFETY: MKL's documented signatures: `int f(int)` for both
        // setters (MKL_THREADING_SEQUENTIAL = 1, MKL_INTERFACE_LP64 = 0),
        // called before any other MKL function; `cblas_sgemm` is SgemmFn
        // under the LP64 interface just selected.
        let sgemm = unsafe {
            let threading: unsafe extern "C" fn(c_int) -> c_int = std::mem::transmute(threading);
            let interface: unsafe extern "C" fn(c_int) -> c_int = std::mem::transmute(interface);
            threading(1);
            interface(0);
            std::mem::transmute::<*mut c_void, SgemmFn>(sgemm)
        };
        return Some(Mkl {
            sgemm,
            version: version(sym(c"MKL_Get_Version_String")),
        });
    }
    None
}

/// MKL's version string, shortened to its number ("2026.2"); empty if
/// absent.
fn version(f: *mut c_void) -> String {
    if f.is_null() {
        return String::new();
    }
    let mut buf = [0 as c_char; 256];
    // SAFETY: `void MKL_Get_Version_String(char *buf, int len)` writes at
    // most `len` bytes, NUL-terminated.
    let s = unsafe {
        let f: unsafe extern "C" fn(*mut c_char, c_int) = std::mem::transmute(f);
        f(buf.as_mut_ptr(), buf.len() as c_int);
        buf[buf.len() - 1] = 0;
        CStr::from_ptr(buf.as_ptr())
    };
    // "Intel(R) oneAPI Math Kernel Library Version 2026.2-Product Build ..."
    let s = s.to_string_lossy();
    s.split_once("Version ")
        .map(|(_, v)| v.split(['-', ' ']).next().unwrap_or("").to_string())
        .unwrap_or_default()
}
