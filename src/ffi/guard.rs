//! The guard every entry point with a context runs through, and its form
//! for ops.

use super::handle::{ag_context, ag_tensor};
use super::pointers::{need, write_out};
use super::registry::claim;
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::status::{AG_STATUS_NULL_ARGUMENT, AG_STATUS_OK, ag_status};
use std::ffi::CString;
use std::panic::{AssertUnwindSafe, catch_unwind};

fn set_error(c: &mut ag_context, e: &Error) -> ag_status {
    c.last_error = CString::new(e.to_string().replace('\0', " ")).unwrap_or_default();
    e.status()
}

/// Runs `f` on the context behind `ctx` with every guarantee of the C API:
/// NULL and liveness checks, busy flag, poisoning, panic capture, last error.
#[inline]
pub(crate) fn guard(
    func: &'static str,
    ctx: *mut ag_context,
    f: impl FnOnce(&mut Context) -> Result<()>,
) -> ag_status {
    if ctx.is_null() {
        return AG_STATUS_NULL_ARGUMENT;
    }
    let (slot, ptr) = match claim(func, ctx) {
        Ok(p) => p,
        Err(e) => return e.status(),
    };
    // SAFETY: claim() proved it live and gave this call exclusive use.
    let c = unsafe { &mut *ptr };
    let st = if c.poisoned {
        set_error(c, &Error::Poisoned { func })
    } else {
        match catch_unwind(AssertUnwindSafe(|| f(&mut c.inner))) {
            Ok(Ok(())) => AG_STATUS_OK,
            Ok(Err(e)) => set_error(c, &e),
            Err(payload) => {
                c.poisoned = true;
                let what = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown panic".into());
                set_error(c, &Error::Panic { func, what })
            }
        }
    };
    slot.release();
    st
}

/// Runs an op producing one tensor and delivers its handle to `out`: the
/// out-pointer is checked before any work, and written only on success.
#[inline]
pub(crate) fn op(
    func: &'static str,
    ctx: *mut ag_context,
    out: *mut ag_tensor,
    f: impl FnOnce(&mut Context) -> Result<Tensor>,
) -> ag_status {
    guard(func, ctx, |c| {
        need(func, "out", out)?;
        let t = f(c)?;
        write_out(func, "out", out, t.into())
    })
}
