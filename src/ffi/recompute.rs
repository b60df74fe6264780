//! Recomputation segments: ag_segment_begin, ag_segment_end and the
//! ag_set_recompute policy (ag_context_set_recompute is its deprecated
//! old name).

use super::prelude::*;
use crate::recompute::RecomputePolicy;

/// ag_set_recompute policy: no segment is recomputed; every
/// activation is kept (the default).
pub const AG_RECOMPUTE_NONE: u32 = 0;
/// ag_set_recompute policy: every segment is recomputed.
pub const AG_RECOMPUTE_ALL: u32 = 1;
/// ag_set_recompute policy: under the arena cap (ag_set_arena_limit),
/// the fewest segments that make an iteration fit, the largest saving first,
/// chosen from the sizes measured in the previous iteration that reached
/// backward (every segment in the first one, when nothing is measured yet);
/// the choice stays the same while the graph repeats. Without a cap, none.
pub const AG_RECOMPUTE_AUTO: u32 = 2;

/// Chooses which segments (ag_segment_begin) are recomputed during backward
/// instead of keeping their internal activations, from the next segment on:
/// AG_RECOMPUTE_NONE, AG_RECOMPUTE_ALL or AG_RECOMPUTE_AUTO. The values and
/// gradients are bit-identical under every policy; ag_memory_stats reports
/// the segments recomputed and the arena bytes saved.
/// Errors: INVALID_ARGUMENT (an unknown policy).
#[unsafe(no_mangle)]
pub extern "C" fn ag_set_recompute(ctx: *mut ag_context, policy: u32) -> ag_status {
    guard("ag_set_recompute", ctx, |c| {
        let p = match policy {
            AG_RECOMPUTE_NONE => RecomputePolicy::None,
            AG_RECOMPUTE_ALL => RecomputePolicy::All,
            AG_RECOMPUTE_AUTO => RecomputePolicy::Auto,
            _ => {
                return Err(Error::InvalidArgument {
                    op: "set_recompute",
                    what: format!(
                        "policy {policy} is not AG_RECOMPUTE_NONE (0), AG_RECOMPUTE_ALL (1) or AG_RECOMPUTE_AUTO (2)"
                    ),
                });
            }
        };
        c.set_recompute(p);
        Ok(())
    })
}

/// Deprecated: use ag_set_recompute (this old name, kept until 0.2, calls
/// it; failures name set_recompute).
/// Errors: as ag_set_recompute: INVALID_ARGUMENT (an unknown policy).
#[deprecated(note = "use ag_set_recompute")]
#[unsafe(no_mangle)]
pub extern "C" fn ag_context_set_recompute(ctx: *mut ag_context, policy: u32) -> ag_status {
    ag_set_recompute(ctx, policy)
}

/// Starts a segment: a stretch of ops (typically one transformer block)
/// that may be recomputed during backward instead of keeping its internal
/// activations, as ag_set_recompute decides. Close it with
/// ag_segment_end before the next ag_segment_begin and before ag_backward.
/// Errors: SEQUENCE (a segment is already open: segments do not nest),
/// ALLOCATION_FAILED (the segment list could not grow).
#[unsafe(no_mangle)]
pub extern "C" fn ag_segment_begin(ctx: *mut ag_context) -> ag_status {
    guard("ag_segment_begin", ctx, |c| c.segment_begin())
}

/// Ends the open segment. `output` is the one tensor made inside the
/// segment that is used after it (a block's output); its handle stays valid
/// until ag_reset. A tensor made before the segment (or a parameter) may be
/// passed too and is left alone. Every other tensor made inside the segment
/// is private to it from now on: passing its handle to any function gives
/// STALE_HANDLE naming the segment (under every policy), because a
/// recomputed segment's memory is reused. On failure the segment stays
/// open.
/// Errors: SEQUENCE (no segment is open), STALE_HANDLE (output is from an
/// earlier iteration, or private to an ended segment), WRONG_CONTEXT,
/// INVALID_HANDLE, OUT_OF_MEMORY (the arena cap leaves no room to copy
/// the output of a recomputed segment out of its scratch region).
#[unsafe(no_mangle)]
pub extern "C" fn ag_segment_end(ctx: *mut ag_context, output: ag_tensor) -> ag_status {
    guard("ag_segment_end", ctx, |c| c.segment_end(&[output.into()]))
}
