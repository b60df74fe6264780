//! Checkpoints: parameters, optimizer state and step, plus an opaque user
//! blob (the trainer keeps its RNG state and vocabulary there).
//!
//! Layout (little-endian):
//! ```text
//! magic "AGCKPT\r\n" | u32 version | u32 n_params | u64 opt_step
//! u32 opt_kind (0 none, else the kind's tag: 1 sgd, 2 adamw) | u32 moments
//! | f32 x5 hyper-params (as the kind's row orders them)
//! u64 user_len | per param: u32 ndim, u64 dims[ndim]
//! payload: per param: values, then each moment | user bytes
//! [running statistics, version 2 only] | u32 CRC32
//! ```
//! Version 1 is a context without running statistics (byte for byte as
//! before they existed); see `checkpoint_buffers.rs` for version 2.
//! The CRC covers every byte before it. Loading validates the whole file
//! into a staging buffer (magic, version, checked lengths, CRC, shapes)
//! before touching any parameter, so a load is all or nothing. Saving
//! writes a temporary file in the same folder, fsyncs it, renames it over
//! the target and fsyncs the folder, so a crash leaves the old file intact.

use crate::arena::Buf;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::fs::{io, write_atomic};
use crate::optim::OptimizerKind;
use std::fs::File;
use std::path::Path;

#[path = "checkpoint_buffers.rs"]
mod buffers;

const MAGIC: &[u8; 8] = b"AGCKPT\r\n";

/// A checkpoint that passed validation against a model: where its parts are.
#[derive(Clone, Copy, Debug)]
pub struct Staged {
    payload_start: usize,
    pub(crate) user_start: usize,
    /// Length of the user bytes.
    pub user_len: usize,
    step: u64,
    code: u32,
    moments: usize,
    /// Where the running statistics' section starts (version 2), if any.
    buffers_start: Option<usize>,
}
const VERSION: u32 = 1;
const VERSION_WITH_BUFFERS: u32 = 2;
/// Most user bytes a checkpoint may carry (64 MiB).
pub const MAX_USER_BYTES: usize = 64 << 20;

fn corrupt(what: impl Into<String>) -> Error {
    Error::CheckpointCorrupt { what: what.into() }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| {
            corrupt(format!(
                "truncated while reading {what} at byte {}",
                self.pos
            ))
        })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().unwrap_or([0; 4]),
        ))
    }
    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().unwrap_or([0; 8]),
        ))
    }
    fn f32(&mut self, what: &str) -> Result<f32> {
        Ok(f32::from_bits(self.u32(what)?))
    }
}

/// The checkpoint's optimizer tag and hyper-parameter floats, from the
/// kind's row (0 and zeros without an optimizer).
fn kind_code(k: Option<OptimizerKind>) -> (u32, [f32; 5]) {
    k.map_or((0, [0.0; 5]), |k| {
        let row = k.row();
        (row.tag, row.hyper)
    })
}

impl Context {
    /// Serialises parameters, optimizer state and `user` bytes.
    pub fn checkpoint_bytes(&mut self, user: &[u8]) -> Result<Vec<u8>> {
        self.checkpoint_bytes_from("checkpoint_save", user, None)
    }

    /// Like [`Context::checkpoint_bytes`], with the optimizer's moments
    /// taken from `gathered` instead of the context: every float's first
    /// moment in the flat parameter layout, then every float's second (as
    /// many as the optimizer keeps). A sharded optimizer's processes gather
    /// their slices (see [`Context::optimizer_state_copy_out`]) and one of
    /// them writes the file the unsharded run would write.
    pub fn checkpoint_bytes_gathered(&mut self, user: &[u8], gathered: &[f32]) -> Result<Vec<u8>> {
        const OP: &str = "checkpoint_save_gathered";
        let want = self.optimizer_moments() * self.grads_len();
        if gathered.len() != want {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!(
                    "{} gathered moment floats, the optimizer keeps {} moments of {} floats",
                    gathered.len(),
                    self.optimizer_moments(),
                    self.grads_len()
                ),
            });
        }
        self.checkpoint_bytes_from(OP, user, Some(gathered))
    }

    fn checkpoint_bytes_from(
        &mut self,
        op: &'static str,
        user: &[u8],
        gathered: Option<&[f32]>,
    ) -> Result<Vec<u8>> {
        if gathered.is_none()
            && self
                .optimizer_state()
                .is_some_and(|o| o.sharded(self.grads_len()))
        {
            return Err(Error::Sequence {
                op,
                what: "the optimizer keeps state for a shard of the parameters only (ag_optimizer_shard): gather its moments and save with ag_checkpoint_save_gathered".into(),
            });
        }
        let moments = self.optimizer_moments();
        let floats: usize = (0..self.param_count())
            .map(|i| self.entry(i as u32).shape.numel() * (1 + moments))
            .sum();
        if user.len() > MAX_USER_BYTES {
            return Err(Error::InvalidArgument {
                op,
                what: format!("{} user bytes (at most {MAX_USER_BYTES})", user.len()),
            });
        }
        let size = 64 + self.param_count() * 56 + floats * 4 + user.len() + self.buffers_bytes();
        self.fault_point(op, size)?;
        let mut out = Vec::new();
        out.try_reserve_exact(size)
            .map_err(|_| Error::AllocationFailed { op, bytes: size })?;
        let opt = self.optimizer_state();
        let (code, hp) = kind_code(opt.map(|o| o.kind()));
        out.extend_from_slice(MAGIC);
        let version = if self.batch_norm_stats_count() == 0 {
            VERSION
        } else {
            VERSION_WITH_BUFFERS
        };
        out.extend_from_slice(&version.to_le_bytes());
        out.extend_from_slice(&(self.param_count() as u32).to_le_bytes());
        out.extend_from_slice(&opt.map_or(0, |o| o.steps()).to_le_bytes());
        out.extend_from_slice(&code.to_le_bytes());
        out.extend_from_slice(&(moments as u32).to_le_bytes());
        hp.iter()
            .for_each(|v| out.extend_from_slice(&v.to_le_bytes()));
        out.extend_from_slice(&(user.len() as u64).to_le_bytes());
        for e in (0..self.param_count() as u32).map(|i| self.entry(i)) {
            out.extend_from_slice(&(e.shape.ndim() as u32).to_le_bytes());
            e.shape
                .dims()
                .iter()
                .for_each(|&d| out.extend_from_slice(&(d as u64).to_le_bytes()));
        }
        let (total, mut offset) = (self.grads_len(), 0);
        let put = |out: &mut Vec<u8>, v: &[f32]| {
            v.iter()
                .for_each(|x| out.extend_from_slice(&x.to_le_bytes()))
        };
        for i in 0..self.param_count() {
            let data = self.entry(i as u32).data;
            put(&mut out, self.read_only(data));
            let n = data.len();
            match (gathered, opt) {
                (Some(g), _) => {
                    (0..moments).for_each(|k| put(&mut out, &g[k * total + offset..][..n]))
                }
                (None, Some(o)) => o
                    .moments(i)
                    .iter()
                    .flatten()
                    .for_each(|&b| put(&mut out, self.read_only(b))),
                (None, None) => {}
            }
            offset += n;
        }
        out.extend_from_slice(user);
        if version == VERSION_WITH_BUFFERS {
            self.put_buffers(&mut out);
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        Ok(out)
    }

    /// Validates `bytes` completely, then (only if valid and matching this
    /// model) loads parameters and optimizer state. Returns the user bytes.
    pub fn checkpoint_load_bytes<'b>(&mut self, bytes: &'b [u8]) -> Result<&'b [u8]> {
        let staged = self.checkpoint_validate(bytes)?;
        Ok(self.checkpoint_commit(bytes, staged))
    }

    /// Checks a checkpoint against this model without changing anything.
    pub fn checkpoint_validate(&self, bytes: &[u8]) -> Result<Staged> {
        if bytes.len() < MAGIC.len() + 8 {
            return Err(corrupt(format!(
                "{} bytes is too short for a checkpoint",
                bytes.len()
            )));
        }
        if &bytes[..8] != MAGIC {
            return Err(corrupt("bad magic (not an arenagrad checkpoint)"));
        }
        let (body, tail) = bytes.split_at(bytes.len() - 4);
        let stored = u32::from_le_bytes(tail.try_into().unwrap_or([0; 4]));
        let mut r = Reader { buf: body, pos: 8 };
        let version = r.u32("version")?;
        if version != VERSION && version != VERSION_WITH_BUFFERS {
            return Err(corrupt(format!(
                "unknown format version {version} (this library reads {VERSION} and {VERSION_WITH_BUFFERS})"
            )));
        }
        if crc32fast::hash(body) != stored {
            return Err(corrupt("CRC32 mismatch (file damaged or truncated)"));
        }
        let n_params = r.u32("parameter count")? as usize;
        let step = r.u64("optimizer step")?;
        let code = r.u32("optimizer kind")?;
        let moments = r.u32("moment count")? as usize;
        let mut hp = [0.0f32; 5];
        for h in hp.iter_mut() {
            *h = r.f32("hyper-parameters")?;
        }
        let user_len = usize::try_from(r.u64("user length")?)
            .ok()
            .filter(|&n| n <= MAX_USER_BYTES)
            .ok_or_else(|| corrupt(format!("user length beyond {MAX_USER_BYTES} bytes")))?;
        // Kind and moment count must agree (none: 0, else as the kind's row
        // allows).
        if !OptimizerKind::tag_fits(code, moments) {
            return Err(corrupt(format!(
                "optimizer kind {code} with {moments} moments"
            )));
        }
        if n_params != self.param_count() {
            return Err(Error::CheckpointMismatch {
                what: format!(
                    "checkpoint has {n_params} parameters, the model {}",
                    self.param_count()
                ),
            });
        }
        for i in 0..n_params {
            let nd = r.u32("rank")? as usize;
            if nd == 0 || nd > crate::MAX_DIMS {
                return Err(corrupt(format!("parameter {i}: rank {nd}")));
            }
            let mut dims = [0usize; crate::MAX_DIMS];
            for d in dims.iter_mut().take(nd) {
                *d = usize::try_from(r.u64("dimension")?)
                    .map_err(|_| corrupt("dimension overflows"))?;
            }
            let model = self.entry(i as u32).shape;
            if model.dims() != &dims[..nd] {
                return Err(Error::CheckpointMismatch {
                    what: format!(
                        "parameter {i}: checkpoint shape [{}] vs model shape {model}",
                        dims[..nd]
                            .iter()
                            .map(|d| d.to_string())
                            .collect::<Vec<_>>()
                            .join(",")
                    ),
                });
            }
        }
        let want = kind_code(self.optimizer_state().map(|o| o.kind())).0;
        let have_moments = self.optimizer_moments();
        // Both sides must agree, "no optimizer" included: a checkpoint without
        // optimizer state loaded into a context with one would keep that
        // context's moments and step count beside the loaded weights, and
        // the next step would move them the wrong way. To start an optimizer
        // from such weights, load them before creating the optimizer.
        if code != want || moments != have_moments {
            return Err(Error::CheckpointMismatch {
                what: format!(
                    "checkpoint optimizer kind {code} ({}) with {moments} moments, model has kind {want} ({}) with {have_moments}",
                    OptimizerKind::tag_name(code),
                    OptimizerKind::tag_name(want)
                ),
            });
        }
        let payload_start = r.pos;
        let floats: usize = (0..n_params)
            .map(|i| self.entry(i as u32).shape.numel() * (1 + moments))
            .sum();
        r.take(floats * 4, "payload")?;
        let user = r.take(user_len, "user bytes")?;
        let buffers_start = self.validate_buffers(&mut r, version == VERSION_WITH_BUFFERS)?;
        if r.pos != body.len() {
            return Err(corrupt(format!("{} trailing bytes", body.len() - r.pos)));
        }
        Ok(Staged {
            payload_start,
            user_start: payload_start + floats * 4,
            user_len: user.len(),
            step,
            code,
            moments,
            buffers_start,
        })
    }

    /// Loads a validated checkpoint; returns its user bytes.
    pub fn checkpoint_commit<'b>(&mut self, bytes: &'b [u8], staged: Staged) -> &'b [u8] {
        let Staged {
            payload_start,
            user_start,
            user_len,
            step,
            code,
            moments,
            buffers_start,
        } = staged;
        let mut pos = payload_start;
        let n_params = self.param_count();
        let put = |c: &mut Context, b: Buf, src: &[u8]| {
            for (d, s) in c.access_one(b).iter_mut().zip(src.chunks_exact(4)) {
                *d = f32::from_le_bytes([s[0], s[1], s[2], s[3]]);
            }
        };
        // A sharded optimizer keeps the part of each moment inside its
        // shard: its buffer starts `lo` floats into the parameter.
        let shard = self.optimizer_state().map_or((0, 0), |o| o.shard());
        let mut offset = 0;
        for i in 0..n_params {
            let data = self.entry(i as u32).data;
            let n = data.len();
            put(self, data, &bytes[pos..pos + n * 4]);
            pos += n * 4;
            let lo = shard.0.clamp(offset, offset + n) - offset;
            offset += n;
            for k in 0..moments {
                let b = self.optimizer_state().and_then(|o| o.moments(i)[k]);
                if let Some(b) = b {
                    put(self, b, &bytes[pos + lo * 4..pos + (lo + b.len()) * 4]);
                }
                pos += n * 4;
            }
        }
        if let Some(o) = self.optimizer_state_mut() {
            o.restore_steps(if code == 0 { 0 } else { step });
        }
        if let Some(pos) = buffers_start {
            self.load_buffers(&bytes[pos..]);
        }
        &bytes[user_start..user_start + user_len]
    }

    /// Writes a checkpoint atomically (temporary file, fsync, rename, fsync
    /// of the folder). On failure the temporary file is removed and any
    /// earlier file at `path` is untouched.
    ///
    /// A `path` that is a symbolic link is followed (through every link of a
    /// chain): the checkpoint replaces the file the link points to, the
    /// temporary file is made next to that file, and the link stays a link.
    pub fn checkpoint_save(&mut self, path: &Path, user: &[u8]) -> Result<()> {
        const OP: &str = "checkpoint_save";
        let bytes = self.checkpoint_bytes(user)?;
        write_atomic(OP, path, &bytes, "checkpoint")
    }

    /// Like [`Context::checkpoint_save`], with the moments from `gathered`
    /// (see [`Context::checkpoint_bytes_gathered`]).
    pub fn checkpoint_save_gathered(
        &mut self,
        path: &Path,
        user: &[u8],
        gathered: &[f32],
    ) -> Result<()> {
        let bytes = self.checkpoint_bytes_gathered(user, gathered)?;
        write_atomic("checkpoint_save_gathered", path, &bytes, "checkpoint")
    }

    /// Reads and loads a checkpoint file; returns its user bytes.
    pub fn checkpoint_load(&mut self, path: &Path) -> Result<Vec<u8>> {
        const OP: &str = "checkpoint_load";
        self.fault_point(OP, 0)?;
        let bytes = self.checkpoint_read(OP, path)?;
        self.checkpoint_load_bytes(&bytes).map(|u| u.to_vec())
    }

    /// Reads a checkpoint file, but never more than any checkpoint of this
    /// model can hold (its header, values and moments plus at most
    /// [`MAX_USER_BYTES`] of user bytes): `/dev/zero` or a huge file is
    /// refused as corrupt instead of exhausting memory. Pipes are read like
    /// files (a FIFO with no writer blocks, as any read of a pipe does).
    pub fn checkpoint_read(&self, op: &'static str, path: &Path) -> Result<Vec<u8>> {
        use std::io::Read;
        let floats: usize = (0..self.param_count())
            .map(|i| self.entry(i as u32).shape.numel() * 3)
            .sum();
        let max = 64
            + self.param_count() * (4 + 8 * crate::MAX_DIMS)
            + floats * 4
            + MAX_USER_BYTES
            + 4
            + self.buffers_bytes();
        let file = File::open(path).map_err(|e| io(op, path, e))?;
        let mut bytes = Vec::new();
        file.take(max as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| io(op, path, e))?;
        if bytes.len() > max {
            return Err(corrupt(format!(
                "{} is longer than any checkpoint of this model ({max} bytes)",
                path.display()
            )));
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> Context {
        let mut c = Context::new();
        c.param(&[2, 3], Some(&[1., 2., 3., 4., 5., 6.])).unwrap();
        c.param(&[3], Some(&[-1., -2., -3.])).unwrap();
        c.optimizer(OptimizerKind::AdamW {
            lr: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        })
        .unwrap();
        c
    }

    fn values(c: &Context) -> Vec<u32> {
        let mut all = Vec::new();
        for p in c.params() {
            let mut v = vec![0.0; c.shape(p).unwrap().numel()];
            c.read(p, &mut v).unwrap();
            all.extend(v.iter().map(|x| x.to_bits()));
        }
        all
    }

    /// The optimizer fields of the header, byte for byte as files written
    /// before the kinds had rows: tag, moment count, then the five
    /// hyper-parameters in the order each kind has always written them.
    #[test]
    fn optimizer_header_bytes_are_pinned() {
        let kinds = [
            (
                OptimizerKind::Sgd {
                    lr: 0.5,
                    momentum: 0.25,
                    weight_decay: 0.125,
                },
                1,
                1,
                [0.5, 0.25, 0.0, 0.0, 0.125],
            ),
            (
                OptimizerKind::Sgd {
                    lr: 0.5,
                    momentum: 0.0,
                    weight_decay: 0.0,
                },
                1,
                0,
                [0.5, 0.0, 0.0, 0.0, 0.0],
            ),
            (
                OptimizerKind::AdamW {
                    lr: 0.5,
                    beta1: 0.25,
                    beta2: 0.75,
                    eps: 1e-8,
                    weight_decay: 0.125,
                },
                2,
                2,
                [0.5, 0.25, 0.75, 1e-8, 0.125],
            ),
        ];
        for (kind, tag, moments, hyper) in kinds {
            let mut c = Context::new();
            c.param(&[2], Some(&[1.0, 2.0])).unwrap();
            c.optimizer(kind).unwrap();
            let bytes = c.checkpoint_bytes(&[]).unwrap();
            let word = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
            assert_eq!((word(24), word(28)), (tag, moments), "{kind:?}");
            for (k, h) in hyper.iter().enumerate() {
                assert_eq!(word(32 + 4 * k), f32::to_bits(*h), "{kind:?} field {k}");
            }
            // Header 60 bytes, one rank-1 shape 12, values and moments, CRC 4.
            assert_eq!(bytes.len(), 60 + 12 + 8 * (1 + moments as usize) + 4);
            c.checkpoint_load_bytes(&bytes).unwrap();
        }
    }

    #[test]
    fn roundtrip_and_every_truncation_and_bitflip_refused() {
        let mut src = model();
        let bytes = src.checkpoint_bytes(b"user-state").unwrap();
        let mut dst = model();
        let p0 = dst.params().next().unwrap();
        dst.param_write(p0, &[0.0; 6]).unwrap();
        let before = values(&dst);
        for cut in 0..bytes.len() {
            let e = dst.checkpoint_load_bytes(&bytes[..cut]).unwrap_err();
            assert!(
                matches!(e, Error::CheckpointCorrupt { .. }),
                "cut {cut}: {e}"
            );
        }
        for bit in (0..bytes.len() * 8).step_by(7) {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(dst.checkpoint_load_bytes(&b).is_err(), "bit {bit}");
        }
        assert_eq!(
            values(&dst),
            before,
            "refused loads leave parameters untouched"
        );
        assert_eq!(dst.checkpoint_load_bytes(&bytes).unwrap(), b"user-state");
        assert_eq!(values(&dst), values(&src));
    }

    #[test]
    fn mismatch_names_first_differing_parameter() {
        let mut src = model();
        let bytes = src.checkpoint_bytes(&[]).unwrap();
        let mut other = Context::new();
        other.param(&[2, 3], None).unwrap();
        other.param(&[4], None).unwrap();
        let e = other.checkpoint_load_bytes(&bytes).unwrap_err();
        assert_eq!(
            e.to_string(),
            "checkpoint_load: checkpoint does not match the model: parameter 1: checkpoint shape [3] vs model shape [4]"
        );
    }

    /// An endless or huge file is refused without reading it all.
    #[test]
    #[cfg_attr(miri, ignore)] // file I/O needs isolation off
    fn endless_file_is_refused_not_read_to_exhaustion() {
        let mut m = model();
        let e = m.checkpoint_load(Path::new("/dev/zero")).unwrap_err();
        assert!(matches!(e, Error::CheckpointCorrupt { .. }), "{e}");
        assert!(e.to_string().contains("longer than any checkpoint"), "{e}");
    }

    #[test]
    #[cfg_attr(miri, ignore)] // file I/O needs isolation off
    fn atomic_save_replaces_and_io_errors_leave_no_temp() {
        let dir = std::env::temp_dir().join(format!("ag_ckpt_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.ckpt");
        let mut c = model();
        c.checkpoint_save(&path, b"a").unwrap();
        c.checkpoint_save(&path, b"b").unwrap();
        let mut d = model();
        assert_eq!(d.checkpoint_load(&path).unwrap(), b"b");
        let bad = dir.join("missing-folder").join("m.ckpt");
        assert!(matches!(
            c.checkpoint_save(&bad, b""),
            Err(Error::Io { .. })
        ));
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left.len(), 1, "{left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
