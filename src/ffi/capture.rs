//! Capture and replay: ag_capture_begin, ag_capture_end, ag_replay,
//! ag_step_free, and the input slots a replay reads (ag_input_new,
//! ag_input_write, ag_seed_write), and ag_dropout_seeded, the dropout a
//! replay can redraw.

use super::prelude::*;
use crate::context::Step;

/// A captured step (ag_capture_end), passed by value. It is valid until
/// ag_step_free or ag_context_free; a freed step's handle is refused
/// (AG_STATUS_STALE_HANDLE). An all-zero ag_step is "no step".
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ag_step {
    /// Slot in the context's list of steps.
    pub index: u32,
    /// Id of the context that captured the step.
    pub context: u32,
    /// The generation the step's tensors carry.
    pub generation: u64,
}

impl From<Step> for ag_step {
    fn from(s: Step) -> Self {
        ag_step {
            index: s.index,
            context: s.context,
            generation: s.generation,
        }
    }
}

impl From<ag_step> for Step {
    fn from(s: ag_step) -> Self {
        Step {
            index: s.index,
            context: s.context,
            generation: s.generation,
        }
    }
}

/// Starts capturing a step: ends the current iteration (as ag_reset
/// does), then records the next one, an ordinary forward and ag_backward,
/// until ag_capture_end. Data that changes between replays goes into input
/// slots (ag_input_new) made inside the capture. ag_reset before
/// ag_capture_end abandons the capture.
/// Errors: SEQUENCE (a capture is already open).
#[unsafe(no_mangle)]
pub extern "C" fn ag_capture_begin(ctx: *mut ag_context) -> ag_status {
    guard("ag_capture_begin", ctx, |c| c.capture_begin())
}

/// Ends the capture: `loss` is the tensor ag_backward ran from in it. On
/// success `*out` receives the step, which is the current iteration: its
/// handles (loss, logits, input slots) stay readable, and after each
/// ag_replay they read that replay's values. No op can be added to the
/// step's graph (SEQUENCE until ag_reset). On failure the capture stays
/// open.
/// Errors: NULL_ARGUMENT (out), SEQUENCE (no capture is open, or no
/// ag_backward from loss since ag_capture_begin), STALE_HANDLE,
/// WRONG_CONTEXT, INVALID_HANDLE (loss), INVALID_ARGUMENT (the graph has an
/// ag_dropout op, whose mask a replay would reuse: use ag_dropout_seeded),
/// ALLOCATION_FAILED.
#[unsafe(no_mangle)]
pub extern "C" fn ag_capture_end(
    ctx: *mut ag_context,
    loss: ag_tensor,
    out: *mut ag_step,
) -> ag_status {
    const F: &str = "ag_capture_end";
    guard(F, ctx, |c| {
        need(F, "out", out)?;
        let s = c.capture_end(loss.into())?;
        write_out(F, "out", out, s.into())
    })
}

/// Runs captured step `step` again: its recorded forward and backward
/// kernels on the current parameters and input slots, into the same
/// memory, with no per-op checks; parameter gradients accumulate as with
/// ag_backward, bit for bit. Ends the current iteration first unless it is
/// the step's. Afterwards the step's handles read this replay's values. A
/// refused replay changes nothing.
/// Errors: STALE_HANDLE (the step was freed), WRONG_CONTEXT,
/// INVALID_HANDLE, SEQUENCE (a capture is open, or a parameter was added
/// since the capture), OUT_OF_MEMORY (the arena cap is below the step's
/// bytes).
#[unsafe(no_mangle)]
pub extern "C" fn ag_replay(ctx: *mut ag_context, step: ag_step) -> ag_status {
    guard("ag_replay", ctx, |c| c.replay(step.into()))
}

/// Frees the step `*step` (its memory and records) and zeroes `*step`; its
/// handles and its tensors' handles are refused from now on. Ends the
/// current iteration if it is the step's. NULL or an all-zero step does
/// nothing.
/// Errors: STALE_HANDLE (already freed), WRONG_CONTEXT, INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn ag_step_free(ctx: *mut ag_context, step: *mut ag_step) -> ag_status {
    const F: &str = "ag_step_free";
    guard(F, ctx, |c| {
        if step.is_null() {
            return Ok(());
        }
        // SAFETY: non-NULL, and the caller passes a valid ag_step (header).
        let s = unsafe { *step };
        if s == ag_step::default() {
            return Ok(());
        }
        c.step_free(s.into())?;
        write_out(F, "step", step, ag_step::default())
    })
}

/// Makes an input slot of shape `shape[0..ndim]`: a constant of the
/// current iteration (no gradient), zero-filled, whose values
/// ag_input_write sets. Made inside a capture, it is the step's: write it
/// before each ag_replay.
/// Errors: NULL_ARGUMENT (out or shape), SHAPE_MISMATCH (ndim outside
/// 1..AG_MAX_DIMS, a zero dimension), OUT_OF_MEMORY, SEQUENCE (a captured
/// step is the current iteration).
#[unsafe(no_mangle)]
pub extern "C" fn ag_input_new(
    ctx: *mut ag_context,
    shape: *const usize,
    ndim: usize,
    out: *mut ag_tensor,
) -> ag_status {
    const F: &str = "ag_input_new";
    guard(F, ctx, |c| {
        need(F, "out", out)?;
        let dims = shape_arg(F, shape, ndim)?;
        let t = c.input_new(dims)?;
        write_out(F, "out", out, t.into())
    })
}

/// Copies `len` floats from `data` into input slot `t` (len must equal its
/// element count); a constant made by ag_tensor_new may be rewritten the
/// same way. A slot of a captured step that is not the current
/// iteration makes the step current first (ending the current iteration,
/// as ag_reset does), so the next ag_replay reads the new values.
/// Errors: NULL_ARGUMENT (data, when len > 0), STALE_HANDLE, WRONG_CONTEXT,
/// INVALID_HANDLE, INVALID_ARGUMENT (t is neither an input slot nor made by ag_tensor_new, or len
/// differs from its element count), SEQUENCE (the slot's step cannot be
/// replayed: a capture is open, or a parameter was added since),
/// OUT_OF_MEMORY (the arena cap is below the slot's step's bytes).
#[unsafe(no_mangle)]
pub extern "C" fn ag_input_write(
    ctx: *mut ag_context,
    t: ag_tensor,
    data: *const f32,
    len: usize,
) -> ag_status {
    const F: &str = "ag_input_write";
    guard(F, ctx, |c| {
        let d = slice_in(F, "data", data, len)?;
        c.input_write(t.into(), d)
    })
}

/// Writes the 64-bit `value` into seed tensor `seed` (an input slot of
/// shape [4], see ag_dropout_seeded), as four 16-bit limbs, least
/// significant first. Like ag_input_write, a seed of a captured step that
/// is not the current iteration makes the step current first, so the next
/// ag_replay draws its dropout masks from `value`.
/// Errors: STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, INVALID_ARGUMENT
/// (seed is neither an input slot nor made by ag_tensor_new, or its shape
/// is not [4]), SEQUENCE (the seed's step cannot be replayed: a capture is
/// open, or a parameter was added since), OUT_OF_MEMORY (the arena cap is
/// below the seed's step's bytes).
#[unsafe(no_mangle)]
pub extern "C" fn ag_seed_write(ctx: *mut ag_context, seed: ag_tensor, value: u64) -> ag_status {
    guard("ag_seed_write", ctx, |c| c.seed_write(seed.into(), value))
}

/// Inverted dropout as ag_dropout, with the seed read from tensor `seed`
/// each time the op's forward runs (eager, ag_replay, recomputation):
/// an input slot of shape [4] (ag_input_new) set with ag_seed_write. In a
/// captured step, ag_seed_write a new seed before each ag_replay for a new
/// mask; a seed left as it was gives the same mask again. A seed value
/// gives the same mask as ag_dropout with that seed, eager or replayed.
/// Errors: NULL_ARGUMENT (out), STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE
/// (x or seed), INVALID_ARGUMENT (p is NaN or outside [0, 1); seed is not
/// an input slot or ag_tensor_new constant, or its values are not a seed
/// written by ag_seed_write), SHAPE_MISMATCH (seed's shape is not [4]),
/// OUT_OF_MEMORY.
#[unsafe(no_mangle)]
pub extern "C" fn ag_dropout_seeded(
    ctx: *mut ag_context,
    x: ag_tensor,
    p: f32,
    seed: ag_tensor,
    out: *mut ag_tensor,
) -> ag_status {
    const F: &str = "ag_dropout_seeded";
    guard(F, ctx, |c| {
        need(F, "out", out)?;
        let t = c.dropout_seeded(x.into(), p, seed.into())?;
        write_out(F, "out", out, t.into())
    })
}

/// Rewrites id buffer `k` of captured step `step` with `len` ids from
/// `ids`: the step's embedding ids and cross-entropy targets, numbered from
/// 0 in the order ag_embedding and ag_cross_entropy were called during the
/// capture. The ids are checked as those ops check them; len must equal
/// the buffer's length. Like ag_input_write, makes the step the current
/// iteration, so the next ag_replay reads the new ids.
/// Errors: NULL_ARGUMENT (ids, when len > 0), STALE_HANDLE (the step was
/// freed), WRONG_CONTEXT, INVALID_HANDLE, INVALID_ARGUMENT (the step has
/// no buffer k, or len differs from its length), INDEX_OUT_OF_RANGE (an id
/// outside [0, V) of its op), SEQUENCE (a capture is open, or a parameter
/// was added since the capture), OUT_OF_MEMORY (the arena cap is below the
/// step's bytes).
#[unsafe(no_mangle)]
pub extern "C" fn ag_input_write_ids(
    ctx: *mut ag_context,
    step: ag_step,
    k: usize,
    ids: *const i32,
    len: usize,
) -> ag_status {
    const F: &str = "ag_input_write_ids";
    guard(F, ctx, |c| {
        let d = slice_in(F, "ids", ids, len)?;
        c.input_write_ids(step.into(), k, d)
    })
}
