//! Contexts and statuses: status names, version, create and free, the last error, reset, grad mode, arena cap, memory figures.

use super::panic_hook::install_panic_hook;
use super::prelude::*;
use super::registry::{context_free, context_new, last_error};
use crate::context::MemoryStats;
use std::panic::{AssertUnwindSafe, catch_unwind};

/// A static, NUL-terminated name for a status code ("unknown status" for
/// values the library never returns). Never NULL; never free it.
#[unsafe(no_mangle)]
pub extern "C" fn ag_status_str(status: ag_status) -> *const c_char {
    let s: &'static [u8] = match status {
        AG_STATUS_OK => b"ok\0",
        AG_STATUS_NULL_ARGUMENT => b"NULL argument\0",
        AG_STATUS_INVALID_CONTEXT => b"invalid context\0",
        AG_STATUS_STALE_HANDLE => b"stale tensor handle\0",
        AG_STATUS_WRONG_CONTEXT => b"handle from another context\0",
        AG_STATUS_INVALID_HANDLE => b"invalid tensor handle\0",
        AG_STATUS_SHAPE_MISMATCH => b"shape mismatch\0",
        AG_STATUS_INVALID_ARGUMENT => b"invalid argument\0",
        AG_STATUS_TOO_LARGE => b"tensor too large\0",
        AG_STATUS_OUT_OF_MEMORY => b"arena full (cap reached, or no memory for the arena)\0",
        AG_STATUS_ALLOCATION_FAILED => b"out of memory outside the arena\0",
        AG_STATUS_INDEX_OUT_OF_RANGE => b"index out of range\0",
        AG_STATUS_NOT_SCALAR => b"backward needs a scalar\0",
        AG_STATUS_SEQUENCE => b"call out of sequence\0",
        AG_STATUS_NON_FINITE => b"non-finite value\0",
        AG_STATUS_IO => b"I/O error\0",
        AG_STATUS_CHECKPOINT_CORRUPT => b"corrupt checkpoint\0",
        AG_STATUS_CHECKPOINT_MISMATCH => b"checkpoint does not match the model\0",
        AG_STATUS_BUSY => b"context busy\0",
        AG_STATUS_PANIC => b"internal panic\0",
        AG_STATUS_POISONED => b"context poisoned\0",
        AG_STATUS_BUFFER_TOO_SMALL => b"output buffer too small\0",
        _ => b"unknown status\0",
    };
    s.as_ptr().cast()
}

/// The library's version as a static string, "MAJOR.MINOR.PATCH" (e.g.
/// "0.1.0"); never free it. A program can compare it with the
/// AG_VERSION_* macros of the header it was compiled with.
#[unsafe(no_mangle)]
pub extern "C" fn ag_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The library's version as MAJOR * 10000 + MINOR * 100 + PATCH (e.g. 100
/// for 0.1.0), equal to AG_VERSION_NUMBER of the header it was built with.
#[unsafe(no_mangle)]
pub extern "C" fn ag_version_number() -> u32 {
    AG_VERSION_NUMBER
}

/// Creates a context and writes it to `*out`. Free it with ag_context_free.
/// Errors: NULL_ARGUMENT (out is NULL), OUT_OF_MEMORY (2^22 contexts are
/// alive already).
#[unsafe(no_mangle)]
pub extern "C" fn ag_context_new(out: *mut *mut ag_context) -> ag_status {
    if out.is_null() {
        return AG_STATUS_NULL_ARGUMENT;
    }
    match catch_unwind(|| {
        install_panic_hook();
        context_new()
    }) {
        Ok(Some(p)) => {
            // SAFETY: non-NULL out-pointer supplied by the caller.
            unsafe { out.write(p) };
            AG_STATUS_OK
        }
        Ok(None) => AG_STATUS_OUT_OF_MEMORY,
        Err(_) => AG_STATUS_PANIC,
    }
}

/// Frees the context `*ctx` and sets `*ctx` to NULL. `ctx == NULL` or
/// `*ctx == NULL` does nothing and returns OK. A context already freed
/// (through another copy of the pointer) is detected: INVALID_CONTEXT, and
/// nothing is freed twice. Works on poisoned contexts.
/// Errors (only these): INVALID_CONTEXT, BUSY (another thread is inside a
/// call on it).
#[unsafe(no_mangle)]
pub extern "C" fn ag_context_free(ctx: *mut *mut ag_context) -> ag_status {
    if ctx.is_null() {
        return AG_STATUS_OK;
    }
    // SAFETY: non-NULL pointer to the caller's variable.
    let p = unsafe { ctx.read() };
    if p.is_null() {
        return AG_STATUS_OK;
    }
    let st = catch_unwind(AssertUnwindSafe(|| context_free(p))).unwrap_or(AG_STATUS_PANIC);
    #[cfg(feature = "trace")]
    print_traced_ops();
    if st == AG_STATUS_OK {
        // SAFETY: as above.
        unsafe { ctx.write(std::ptr::null_mut()) };
    }
    st
}

/// The message of the last failed call on `ctx`, naming the function or op,
/// the argument and the shapes. Empty if no call failed yet. Valid until
/// the next call on this context; never free it. Never NULL: for a NULL,
/// freed or busy context a static explanation is returned.
#[unsafe(no_mangle)]
pub extern "C" fn ag_context_last_error(ctx: *const ag_context) -> *const c_char {
    catch_unwind(AssertUnwindSafe(|| last_error(ctx)))
        .unwrap_or(c"ag_context_last_error: panic".as_ptr())
}

/// Ends the iteration: all activation handles become stale (using them gives
/// STALE_HANDLE), the arena and tape are recycled without freeing memory.
/// Parameters, their gradients and the optimizer are kept.
/// Errors: none of its own.
#[unsafe(no_mangle)]
pub extern "C" fn ag_reset(ctx: *mut ag_context) -> ag_status {
    guard("ag_reset", ctx, |c| {
        c.reset();
        Ok(())
    })
}

/// Turns gradient recording on (default) or off (inference, sampling).
/// Errors: none of its own.
#[unsafe(no_mangle)]
pub extern "C" fn ag_set_grad_enabled(ctx: *mut ag_context, enabled: bool) -> ag_status {
    guard("ag_set_grad_enabled", ctx, |c| {
        c.set_grad_enabled(enabled);
        Ok(())
    })
}

/// Caps the arena at `bytes` (0 removes the cap). An op that would pass it
/// fails with OUT_OF_MEMORY and leaves the context usable after ag_reset.
/// Errors: none of its own.
#[unsafe(no_mangle)]
pub extern "C" fn ag_set_arena_limit(ctx: *mut ag_context, bytes: usize) -> ag_status {
    guard("ag_set_arena_limit", ctx, |c| {
        c.set_arena_limit(if bytes == 0 { None } else { Some(bytes) });
        Ok(())
    })
}

/// Writes the context's memory figures (an ag_memory_stats_t) to `*out`.
/// Errors: NULL_ARGUMENT (out).
#[unsafe(no_mangle)]
pub extern "C" fn ag_memory_stats(ctx: *mut ag_context, out: *mut MemoryStats) -> ag_status {
    guard("ag_memory_stats", ctx, |c| {
        write_out("ag_memory_stats", "out", out, c.memory_stats())
    })
}

/// With the `trace` feature and `AG_TRACE_OPS` set: each op kind's kernel
/// time so far, longest first, on stderr.
#[cfg(feature = "trace")]
fn print_traced_ops() {
    let Some(t) = std::env::var_os("AG_TRACE_OPS").and(crate::trace::snapshot()) else {
        return;
    };
    let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
    let total: f64 = t.ops.iter().map(|o| ms(o.wall)).sum();
    let mut ops = t.ops;
    ops.sort_by_key(|o| std::cmp::Reverse(o.wall));
    eprintln!(
        "trace ops: {total:.1} ms in op kernels, {} threads (kind dir calls ms share)",
        crate::pool::thread_info().threads
    );
    for o in &ops {
        eprintln!(
            "trace op {:<24} {} {:>7} {:>10.2} {:>6.2}%",
            o.kind,
            if o.backward { "bwd" } else { "fwd" },
            o.calls,
            ms(o.wall),
            100.0 * ms(o.wall) / total.max(1e-9),
        );
    }
}
