//! The parameter gradients as one flat array: zero-copy access and copies
//! in and out, for data-parallel training (the application reduces the
//! array across processes, e.g. with one MPI_Allreduce per step).

use super::prelude::*;
use crate::grads::check_grads_len;
use crate::{GradEvent, GradReadyFn};
use std::ffi::c_void;

/// Writes the number of gradient floats to `*len`: the sum of every
/// parameter's element count (0 before the first parameter), the length
/// ag_grads_copy_out and ag_grads_copy_in expect.
/// Errors: NULL_ARGUMENT (len).
#[unsafe(no_mangle)]
pub extern "C" fn ag_grads_len(ctx: *mut ag_context, len: *mut usize) -> ag_status {
    const F: &str = "ag_grads_len";
    guard(F, ctx, |c| write_out(F, "len", len, c.grads_len()))
}

/// Gives direct access to every parameter gradient, without copying: on
/// success `*ptr` points to `*len` floats, 64-byte aligned, holding the
/// gradients parameter after parameter in creation order (the order of
/// ag_param_at), each row-major, packed without gaps. The context owns the
/// memory; the caller may read and write it between calls into the
/// context, for example with MPI_Allreduce(MPI_IN_PLACE, ptr, len,
/// MPI_FLOAT, MPI_SUM, comm) after ag_backward.
/// Validity: the pointer stays valid until a parameter is added to the
/// context (the block grows and moves), the context's optimizer is created
/// (the block is trimmed to its exact size and moves once), or the context
/// is freed. Call ag_grads_buffer again after any of the first two; once the
/// optimizer exists, the pointer never changes.
/// Sequencing: ag_backward adds into these floats; ag_zero_grad clears them.
/// Write them after ag_backward and before ag_clip_grad_norm: the clip
/// computes its norm from them and records that they are finite, and
/// ag_optimizer_step trusts that record, so values written between the clip
/// and the step are neither clipped nor checked for NaN (ag_grads_copy_in
/// has no such restriction). Without a clip, ag_optimizer_step checks them
/// itself. Writes through the pointer do not count as a backward for
/// ag_optimizer_step's SEQUENCE check.
/// Errors: NULL_ARGUMENT (ptr or len), SEQUENCE (the context has no
/// parameters yet, so there is no gradient block).
#[unsafe(no_mangle)]
pub extern "C" fn ag_grads_buffer(
    ctx: *mut ag_context,
    ptr: *mut *mut f32,
    len: *mut usize,
) -> ag_status {
    const F: &str = "ag_grads_buffer";
    guard(F, ctx, |c| {
        need(F, "ptr", ptr)?;
        need(F, "len", len)?;
        let (p, n) = c.grads_raw().ok_or_else(|| Error::Sequence {
            op: F,
            what: "the context has no parameters yet, hence no gradient block".into(),
        })?;
        write_out(F, "ptr", ptr, p)?;
        write_out(F, "len", len, n)
    })
}

/// Copies every parameter gradient, in the layout ag_grads_buffer
/// describes, to `dst[0..len]`; `len` must equal ag_grads_len's count
/// (`dst` may be NULL when it is 0).
/// Errors: NULL_ARGUMENT (dst when len > 0), INVALID_ARGUMENT (len differs
/// from the gradient count; nothing is written).
#[unsafe(no_mangle)]
pub extern "C" fn ag_grads_copy_out(ctx: *mut ag_context, dst: *mut f32, len: usize) -> ag_status {
    const F: &str = "ag_grads_copy_out";
    guard(F, ctx, |c| {
        // The count first: a wrong length is refused before the pointer is used.
        check_grads_len(F, "dst", len, c.grads_len())?;
        c.grads_copy_out(slice_out(F, "dst", dst, len)?)
    })
}

/// Replaces every parameter gradient by `src[0..len]`, in the layout
/// ag_grads_buffer describes; `len` must equal ag_grads_len's count (`src`
/// may be NULL when it is 0). The values are then the gradients of the next
/// ag_optimizer_step, exactly as if a backward had produced them: the step
/// accepts them without a new ag_backward, and checks them for NaN and
/// infinity (any earlier ag_clip_grad_norm's finiteness record is dropped;
/// clip again to clip them).
/// Errors: NULL_ARGUMENT (src when len > 0), INVALID_ARGUMENT (len differs
/// from the gradient count; nothing changes).
#[unsafe(no_mangle)]
pub extern "C" fn ag_grads_copy_in(ctx: *mut ag_context, src: *const f32, len: usize) -> ag_status {
    const F: &str = "ag_grads_copy_in";
    guard(F, ctx, |c| {
        check_grads_len(F, "src", len, c.grads_len())?;
        c.grads_copy_in(slice_in(F, "src", src, len)?)
    })
}

/// A gradient-ready callback (see ag_set_grad_ready_callback): `count > 0`:
/// floats `first .. first + count` of the gradient block (ag_grads_buffer)
/// are final for the running ag_backward; `count == 0`: a tick (the walk
/// passed one more op; nothing new is final), for a caller whose transport
/// must be driven while backward runs (e.g. MPI_Test).
pub type ag_grad_ready_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, first: usize, count: usize)>;

/// The C callback and its argument, carried by the context.
struct CGradReady {
    f: unsafe extern "C" fn(*mut c_void, usize, usize),
    user_data: *mut c_void,
}

// SAFETY: the context, and so this callback, is used by one thread at a
// time (the registry's busy flag); ag_set_grad_ready_callback's contract
// makes `user_data` valid on whichever thread calls ag_backward.
unsafe impl Send for CGradReady {}

impl CGradReady {
    fn call(&self, e: GradEvent<'_>) {
        let (first, count) = match e {
            GradEvent::Ready { first, grads } => (first, grads.len()),
            GradEvent::Tick => (0, 0),
        };
        // SAFETY: the caller registered `f` with this `user_data` and keeps
        // both valid while the callback is set (the header's contract).
        unsafe { (self.f)(self.user_data, first, count) }
    }
}

/// Asks every later ag_backward to call `callback(user_data, first, count)` as
/// soon as a bucket of the gradient block holds its final value for that
/// backward, so the caller can start reducing it (an MPI_Iallreduce) while
/// backward differentiates the rest; `callback` NULL removes it.
/// Buckets: runs of whole parameters from the end of the block backwards,
/// each at least `bucket_bytes` long (the one at offset 0 may be shorter; 0:
/// one parameter per bucket). A parameter is final once the walk passed
/// the first op reading it; every successful ag_backward reports each
/// non-empty bucket exactly once (also with recomputed segments, and once
/// per micro-batch when gradients accumulate: the values then include the
/// earlier micro-batches), in the order they become final, plus a tick
/// (`count` 0) after every recorded op. Gradients of a failed ag_backward
/// are never reported.
/// The callback runs inside ag_backward, on its thread: it must not call
/// into this context (BUSY) and must not write floats outside the ranges
/// reported so far; its writes must be complete before the next call that
/// reads or adds to gradients (ag_clip_grad_norm, ag_optimizer_step,
/// ag_backward, ...). `callback` and `user_data` must stay valid until the
/// callback is replaced or removed or the context is freed; the library
/// never frees `user_data`.
/// Errors: ALLOCATION_FAILED (the bucket table; the old callback stays).
#[unsafe(no_mangle)]
pub extern "C" fn ag_set_grad_ready_callback(
    ctx: *mut ag_context,
    callback: ag_grad_ready_fn,
    user_data: *mut c_void,
    bucket_bytes: usize,
) -> ag_status {
    guard("ag_set_grad_ready_callback", ctx, |c| {
        let cb = callback.map(|f| {
            let w = CGradReady { f, user_data };
            Box::new(move |e: GradEvent<'_>| w.call(e)) as GradReadyFn
        });
        c.set_grad_ready(bucket_bytes, cb)
    })
}
