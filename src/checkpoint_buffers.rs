//! The running statistics' section of a checkpoint (format version 2):
//! u32 n_sets, then per set u32 channels, u64 num_batches_tracked, f32
//! running_mean[C], f32 running_var[C], after the user bytes. Version 2
//! loads only into a context with the same statistics (count and
//! channels), version 1 only into one without.

use super::Reader;
use crate::context::Context;
use crate::error::{Error, Result};

impl Context {
    /// Bytes of the running statistics' section (0 without statistics).
    pub(super) fn buffers_bytes(&self) -> usize {
        let reg = self.buffers();
        if reg.len() == 0 {
            return 0;
        }
        4 + (0..reg.len())
            .map(|i| 12 + 8 * reg.get(i).channels)
            .sum::<usize>()
    }

    /// Checks the running statistics' section (version 2) against the
    /// context's statistics; where it starts. Version 1 has none, which
    /// matches only a context without statistics.
    pub(super) fn validate_buffers(&self, r: &mut Reader, present: bool) -> Result<Option<usize>> {
        let have = self.batch_norm_stats_count();
        if !present {
            if have != 0 {
                return Err(Error::CheckpointMismatch {
                    what: format!("checkpoint has no running statistics, the model {have} sets"),
                });
            }
            return Ok(None);
        }
        let start = r.pos;
        let n = r.u32("statistics count")? as usize;
        if n != have {
            return Err(Error::CheckpointMismatch {
                what: format!("checkpoint has {n} sets of running statistics, the model {have}"),
            });
        }
        for i in 0..n {
            let c = r.u32("statistics channels")? as usize;
            let want = self.buffers().get(i).channels;
            if c != want {
                return Err(Error::CheckpointMismatch {
                    what: format!(
                        "running statistics {i}: checkpoint has {c} channels, the model {want}"
                    ),
                });
            }
            r.u64("num_batches_tracked")?;
            r.take(8 * c, "running statistics")?;
        }
        Ok(Some(start))
    }

    /// Appends the section.
    pub(super) fn put_buffers(&self, out: &mut Vec<u8>) {
        let reg = self.buffers();
        out.extend_from_slice(&(reg.len() as u32).to_le_bytes());
        for i in 0..reg.len() {
            let set = reg.get(i);
            out.extend_from_slice(&(set.channels as u32).to_le_bytes());
            out.extend_from_slice(&set.num_batches.to_le_bytes());
            for v in self.read_only(set.values) {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
    }

    /// Loads a section that [`Context::validate_buffers`] accepted.
    pub(super) fn load_buffers(&mut self, section: &[u8]) {
        let mut pos = 4;
        for i in 0..self.batch_norm_stats_count() {
            let (c, values) = (self.stats_bufs(i).0, self.buffers().get(i).values);
            let count = u64::from_le_bytes(section[pos + 4..pos + 12].try_into().unwrap_or([0; 8]));
            pos += 12;
            let src = &section[pos..pos + 8 * c];
            for (d, s) in self.access_one(values).iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
            }
            pos += 8 * c;
            self.set_batches_tracked(i, count);
        }
    }
}
