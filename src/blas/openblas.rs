//! The OpenBLAS this crate links, looked up by symbol name, so that a BLAS
//! without some of these functions still links (and just cannot switch).
//! Its own room: the one place that calls into OpenBLAS by symbol, apart
//! from the product itself. The unsafe code relies on each symbol having
//! the signature OpenBLAS exports it with (every block names it), and the
//! kernel switch on no product being in flight, which its caller ensures.

use std::ffi::{CStr, c_char, c_void};

// Declared inside functions: the header generator reads module-level
// extern blocks as part of the C API.
pub(super) fn set_num_threads(n: std::ffi::c_int) {
    unsafe extern "C" {
        fn openblas_set_num_threads(n: std::ffi::c_int);
        fn openblas_get_num_threads() -> std::ffi::c_int;
    }
    // Only a change: OpenBLAS's setter starts its worker threads again
    // when [`stop_workers`] has ended them, whatever the count.
    // SAFETY: a plain getter and setter exported by libopenblas, which
    // this crate links.
    unsafe {
        if openblas_get_num_threads() != n {
            openblas_set_num_threads(n)
        }
    }
}

/// An address inside the OpenBLAS this crate links.
fn anchor() -> *const c_void {
    unsafe extern "C" {
        fn openblas_set_num_threads(n: std::ffi::c_int);
    }
    openblas_set_num_threads as *const c_void
}

/// dlsym in the library that defines `openblas_set_num_threads` (found
/// with dladdr, so it works when arenagrad itself was loaded with
/// RTLD_LOCAL), else in the global scope.
pub(super) fn sym(name: &CStr) -> *mut c_void {
    static HANDLE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let handle = *HANDLE.get_or_init(|| {
        let mut info: libc::Dl_info = libc::Dl_info {
            dli_fname: std::ptr::null(),
            dli_fbase: std::ptr::null_mut(),
            dli_sname: std::ptr::null(),
            dli_saddr: std::ptr::null_mut(),
        };
        let f = anchor();
        // SAFETY: dladdr only reads the address and fills `info`.
        if unsafe { libc::dladdr(f, &mut info) } != 0 && !info.dli_fname.is_null() {
            // SAFETY: dli_fname is a NUL-terminated path owned by the
            // loader; RTLD_NOLOAD only returns an already-loaded object
            // (a reference we keep for the life of the process).
            let h = unsafe { libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
            if !h.is_null() {
                return h as usize;
            }
        }
        libc::RTLD_DEFAULT as usize
    });
    // SAFETY: a valid handle (or RTLD_DEFAULT) and a C string.
    unsafe { libc::dlsym(handle as *mut c_void, name.as_ptr()) }
}

/// Calls a `const char *f(void)` by name; None if absent.
pub(super) fn string(name: &CStr) -> Option<String> {
    let f = sym(name);
    if f.is_null() {
        return None;
    }
    // SAFETY: OpenBLAS's openblas_get_corename/openblas_get_config have
    // this signature and return static NUL-terminated strings.
    let s = unsafe {
        let f: unsafe extern "C" fn() -> *const c_char = std::mem::transmute(f);
        let p = f();
        if p.is_null() {
            return None;
        }
        CStr::from_ptr(p)
    };
    Some(s.to_string_lossy().trim().to_string())
}

/// Ends OpenBLAS's worker threads; false where the library has no
/// `blas_thread_shutdown_`. OpenBLAS starts them when it loads and each
/// busy-waits (sched_yield in a loop) for about 2^28 cycles before it
/// sleeps: 0.1 s of a core taken from the pool's threads at the start of
/// every process, though arenagrad never gives them work (it runs OpenBLAS
/// single-threaded). OpenBLAS starts them again if a threaded call ever
/// comes (its `exec_blas_async` checks `blas_server_avail`).
///
/// SAFETY (the caller's): no threaded OpenBLAS call may be in flight;
/// single-threaded calls never reach the workers. As for [`switch`],
/// arenagrad calls it once, inside the OnceLock every product waits for.
pub(super) unsafe fn stop_workers() -> bool {
    let shutdown = sym(c"blas_thread_shutdown_");
    if shutdown.is_null() {
        return false;
    }
    // SAFETY: `int blas_thread_shutdown_(void)` in OpenBLAS; it joins the
    // workers under its server lock. The caller's contract covers the rest.
    unsafe {
        let shutdown: unsafe extern "C" fn() -> std::ffi::c_int = std::mem::transmute(shutdown);
        shutdown();
    }
    true
}

/// Switches a DYNAMIC_ARCH OpenBLAS to the kernel family `core`.
///
/// SAFETY (the caller's): no BLAS call may be in flight in the process.
/// arenagrad calls this once, inside the OnceLock that every one of its
/// products waits for, before its first product. What the switch
/// changes is what OpenBLAS's load-time init set from the CPU model:
/// the `gotoblas` table pointer (the quit function clears it, the init
/// function reads OPENBLAS_CORETYPE, points it at that family's table
/// and runs the table's own parameter setup). OpenBLAS's work buffers
/// and its thread server are sized by build-time constants, the same
/// for every family, and read the table at each call, so the result is
/// the state OpenBLAS would have had with OPENBLAS_CORETYPE set at load.
pub(super) unsafe fn switch(core: &str) -> bool {
    let (quit, init) = (sym(c"gotoblas_dynamic_quit"), sym(c"gotoblas_dynamic_init"));
    if quit.is_null() || init.is_null() {
        return false;
    }
    // SAFETY: both are `void f(void)` in OpenBLAS; the environment
    // variable exists only for the duration of the init call, which is
    // the one place OpenBLAS reads it; the caller guarantees no other
    // BLAS call runs meanwhile.
    unsafe {
        let quit: unsafe extern "C" fn() = std::mem::transmute(quit);
        let init: unsafe extern "C" fn() = std::mem::transmute(init);
        quit();
        std::env::set_var("OPENBLAS_CORETYPE", core);
        init();
        std::env::remove_var("OPENBLAS_CORETYPE");
    }
    true
}
