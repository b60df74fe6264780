//! Replay of a captured step (see `context::capture` for what a step
//! holds and what is checked): the forward log through the ops' dispatch,
//! then the ordinary backward, or the step's replay program. Kept out
//! of `context` like `backward.rs`, so that the context's modules do not
//! import the ops (which import the context).

use crate::context::{Context, Step};
use crate::error::Result;
use crate::ops::elementwise::scalar::ScalarKernels;

impl Context {
    /// Runs captured step `s` again: its forward, then its backward from
    /// its loss, on the current parameters and input slots; parameter
    /// gradients accumulate as in the eager backward. Ends the current
    /// iteration first unless it is this step's. Afterwards the step is
    /// resident: its handles read this replay's values. Refusals change
    /// nothing: INVALID_HANDLE, WRONG_CONTEXT, STALE_HANDLE (freed step),
    /// SEQUENCE (a capture is open, or a parameter was added since the
    /// capture), OUT_OF_MEMORY (arena cap below the step's bytes).
    pub fn replay(&mut self, s: Step) -> Result<()> {
        let k = self.replay_open("replay", s)?;
        if self.replay_program::<ScalarKernels>(k) {
            return Ok(());
        }
        for i in 0..self.replay_log_len(k) {
            let Some(node) = self.replay_log_node(k, i) else {
                return Ok(());
            };
            crate::ops::dispatch::forward(self, &node.op, node.out);
        }
        self.replay_backward(k)
    }
}
