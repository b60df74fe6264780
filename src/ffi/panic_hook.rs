//! The panic hook that keeps panics caught by the guard silent.

use super::registry::caught_by_guard;

/// Caught panics are silent unless the environment asks for them.
///
/// A panic inside a C call is a library bug that `guard` turns into
/// AG_STATUS_PANIC, with the message kept for ag_context_last_error, so by
/// default nothing reaches the host program's stderr. AG_PRINT_PANICS=1
/// (read at each panic) restores the usual Rust message, with a backtrace
/// when RUST_BACKTRACE is set.
///
/// The hook is process-wide (Rust has one), installed once when the first
/// context is made, and hands every panic it does not silence to the hook
/// that was there before. It silences a panic only when it will be caught
/// by `guard`: the panicking thread is the owner of a context whose busy
/// flag is set (claim records the owner in the context's slot, so no
/// thread-local is needed), or it is a context's worker thread while some
/// context is inside a call (the worker's panic is re-raised on the calling
/// thread, inside that call). Every other panic, e.g. from a Rust program
/// using the crate directly, is printed as usual.
pub(super) fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if print_panics() || !caught_by_guard() {
                previous(info);
            }
        }));
    });
}

fn print_panics() -> bool {
    std::env::var_os("AG_PRINT_PANICS").is_some_and(|v| !v.is_empty() && v != "0")
}
