//! The running statistics of batch normalisation: the context's side of
//! the buffer registry (`crate::buffers`).

use super::{BatchNormStats, Context};
use crate::arena::Buf;
use crate::buffers::StatsSet;
use crate::error::{Error, Result};

impl Context {
    /// New running statistics for a batch norm over `channels` channels:
    /// `<prefix>.running_mean` (zeros), `<prefix>.running_var` (ones) and
    /// `<prefix>.num_batches_tracked` (0), the names checkpoints and
    /// safetensors files store them under. The prefix: UTF-8, 1 to
    /// [`MAX_STATS_PREFIX_BYTES`](crate::MAX_STATS_PREFIX_BYTES) bytes, no
    /// NUL, unique among the context's statistics. Like parameters, they are
    /// made before the iteration's first activation; they are not
    /// parameters (no gradient, no optimizer state, not in `param_count`).
    pub fn batch_norm_stats(&mut self, prefix: &str, channels: usize) -> Result<BatchNormStats> {
        const OP: &str = "batch_norm_stats_new";
        if channels == 0 || channels > u32::MAX as usize {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!("{channels} channels (must be 1 to 2^32 - 1)"),
            });
        }
        if self.live_tensors() != self.param_count() {
            return Err(Error::Sequence {
                op: OP,
                what: "statistics must be created before any activation of the iteration (call ag_reset first)".into(),
            });
        }
        self.check_new_stats(OP, prefix)?;
        let values = self.alloc_persistent(OP, 2 * channels)?;
        let set = StatsSet {
            prefix: prefix.into(),
            values,
            channels,
            num_batches: 0,
        };
        self.access_one(set.var()).fill(1.0);
        let index = self.push_stats(set);
        Ok(BatchNormStats {
            index,
            context: self.id(),
        })
    }

    /// How many sets of running statistics the context has.
    pub fn batch_norm_stats_count(&self) -> usize {
        self.buffers().len()
    }

    /// The set named by `prefix`, if any.
    pub fn batch_norm_stats_by_prefix(&self, prefix: &str) -> Option<BatchNormStats> {
        self.buffers().find(prefix).map(|index| BatchNormStats {
            index,
            context: self.id(),
        })
    }

    /// The registry index of `s`, checked: InvalidArgument for another
    /// context's statistics or an index past the last set (not a tensor
    /// handle, so not the handle errors).
    pub(crate) fn stats_index(&self, op: &'static str, s: BatchNormStats) -> Result<usize> {
        let what = if s.context != self.id() {
            format!(
                "statistics of context {} used in context {}",
                s.context,
                self.id()
            )
        } else if s.index as usize >= self.buffers().len() {
            format!(
                "no statistics of index {} (the context has {})",
                s.index,
                self.buffers().len()
            )
        } else {
            return Ok(s.index as usize);
        };
        Err(Error::InvalidArgument { op, what })
    }

    /// Channels, running mean and running variance of set `i`.
    pub(crate) fn stats_bufs(&self, i: usize) -> (usize, Buf, Buf) {
        let set = self.buffers().get(i);
        (set.channels, set.mean(), set.var())
    }

    /// The prefix and number of channels of `s`.
    pub fn batch_norm_stats_info(&self, s: BatchNormStats) -> Result<(&str, usize)> {
        let set = self
            .buffers()
            .get(self.stats_index("batch_norm_stats_info", s)?);
        Ok((&set.prefix, set.channels))
    }

    /// Copies the running mean and variance of `s` into `mean` and `var`
    /// (`[C]` each) and returns `num_batches_tracked`.
    pub fn batch_norm_stats_read(
        &mut self,
        s: BatchNormStats,
        mean: &mut [f32],
        var: &mut [f32],
    ) -> Result<u64> {
        const OP: &str = "batch_norm_stats_read";
        let i = self.stats_index(OP, s)?;
        let (c, m, v) = self.stats_bufs(i);
        check_len(OP, c, mean.len(), var.len())?;
        mean.copy_from_slice(self.read_only(m));
        var.copy_from_slice(self.read_only(v));
        Ok(self.buffers().get(i).num_batches)
    }

    /// Overwrites the running mean, variance and `num_batches_tracked` of
    /// `s` (e.g. loading weights from elsewhere).
    pub fn batch_norm_stats_write(
        &mut self,
        s: BatchNormStats,
        mean: &[f32],
        var: &[f32],
        num_batches: u64,
    ) -> Result<()> {
        const OP: &str = "batch_norm_stats_write";
        let i = self.stats_index(OP, s)?;
        let (c, m, v) = self.stats_bufs(i);
        check_len(OP, c, mean.len(), var.len())?;
        self.access_one(m).copy_from_slice(mean);
        self.access_one(v).copy_from_slice(var);
        self.set_batches_tracked(i, num_batches);
        Ok(())
    }
}

fn check_len(op: &'static str, c: usize, mean: usize, var: usize) -> Result<()> {
    if mean != c || var != c {
        return Err(Error::InvalidArgument {
            op,
            what: format!("mean has {mean} and var {var} values but the statistics have {c}"),
        });
    }
    Ok(())
}
