//! Small helpers for tests that call the C API from Rust.

use arenagrad::ffi::*;
use std::ffi::CStr;

/// Asserts `st` is OK, naming the call.
pub fn ok(st: ag_status, what: &str) {
    assert_eq!(st, AG_STATUS_OK, "{what}: {st}");
}

/// The name `ag_status_str` gives `st`.
pub fn status_name(st: ag_status) -> String {
    // SAFETY: ag_status_str returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(ag_status_str(st)) }
        .to_string_lossy()
        .into_owned()
}

/// The last error of `ctx` (also of a NULL or dead context).
pub fn last_error(ctx: *const ag_context) -> String {
    // SAFETY: never NULL, NUL-terminated, valid until the next call on ctx.
    unsafe { CStr::from_ptr(ag_context_last_error(ctx)) }
        .to_string_lossy()
        .into_owned()
}
