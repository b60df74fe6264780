//! The parameter gradients as one flat array: zero-copy access and copies
//! in and out, for data-parallel training (the application reduces the
//! array across processes, e.g. with one MPI_Allreduce per step).
#![allow(unsafe_code)]

use super::*;
use crate::grads::check_grads_len;

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
