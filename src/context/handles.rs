//! Tensor handles: making one for a table row and checking one a caller
//! passes in. Its own room: every op resolves each input here, and the
//! exact reason a handle is refused (foreign, stale, never issued, inside
//! a recomputed segment) is worked out only off the fast path.

use super::{Context, Tensor};
use crate::error::{Error, Result};

impl Context {
    #[inline(always)]
    pub(crate) fn handle(&self, id: u32) -> Tensor {
        let generation = if (id as usize) < self.param_count() {
            0
        } else {
            self.generation()
        };
        Tensor {
            index: id,
            context: self.id(),
            generation,
        }
    }

    /// Checks a handle and returns its table index. Every op resolves
    /// each input: the common valid handle is a few compares inline, and
    /// anything else goes to [`resolve_checked`](Self::resolve_checked),
    /// which finds the exact error.
    #[inline(always)]
    pub(crate) fn resolve(&self, op: &'static str, t: Tensor) -> Result<u32> {
        let idx = t.index as usize;
        let n_params = self.param_count();
        let valid = t.context == self.id()
            && if t.generation == 0 {
                idx < n_params
            } else {
                t.generation == self.generation()
                    && idx >= n_params
                    && idx < self.live_tensors()
                    && self.rc().segments_len() == 0
            };
        // A context id is never 0, so a valid handle's is not either.
        if valid {
            return Ok(t.index);
        }
        self.resolve_checked(op, t)
    }

    #[cold]
    #[inline(never)]
    fn resolve_checked(&self, op: &'static str, t: Tensor) -> Result<u32> {
        if t.context == 0 {
            // No context has id 0: a zeroed or garbage handle.
            return Err(Error::InvalidHandle { op, index: t.index });
        }
        if t.context != self.id() {
            return Err(Error::WrongContext {
                op,
                handle_context: t.context,
                context: self.id(),
            });
        }
        let idx = t.index as usize;
        let n_params = self.param_count();
        if t.generation == 0 {
            if idx < n_params {
                return Ok(t.index);
            }
            return Err(Error::InvalidHandle { op, index: t.index });
        }
        if idx < n_params {
            return Err(Error::InvalidHandle { op, index: t.index });
        }
        if t.generation != self.generation() {
            // A generation from the future cannot come from this context.
            if t.generation > self.top_generation() {
                return Err(Error::InvalidHandle { op, index: t.index });
            }
            return Err(Error::StaleHandle {
                op,
                generation: t.generation,
                current: self.generation(),
            });
        }
        if idx >= self.live_tensors() {
            return Err(Error::InvalidHandle { op, index: t.index });
        }
        if let Some(segment) = self.rc().sealed(t.index) {
            return Err(Error::SegmentInternal {
                op,
                index: t.index,
                segment,
            });
        }
        Ok(t.index)
    }
}
