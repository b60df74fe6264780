//! Sharded optimizer state (ZeRO stage 1) for data-parallel callers: each
//! process keeps the optimizer moments of, and updates, only its slice of
//! the parameters, then the processes exchange the updated slices.
//!
//! Slices are float ranges of the flat parameter layout, which is the
//! gradient block's (see [`crate::grads`]): parameter after parameter in
//! creation order, each row-major, packed; a range may start or end inside
//! a parameter. The update of each float depends on that float's gradient,
//! moments and value only, so a sharded step changes the same bits the
//! unsharded step would inside its slice.

use crate::arena::Buf;
use crate::context::Context;
use crate::error::{Error, Result};

impl Context {
    /// Makes the optimizer created next keep state for, and update, only
    /// floats `first..first + len` of the flat parameter layout (of the
    /// parameters that exist now). Call it after the last parameter and
    /// before the optimizer; a later call replaces the range. A sharded
    /// optimizer's checkpoint is written from gathered moments
    /// ([`Context::checkpoint_bytes_gathered`]); loading keeps its slice.
    pub fn optimizer_shard(&mut self, first: usize, len: usize) -> Result<()> {
        const OP: &str = "optimizer_shard";
        if self.has_optimizer() {
            return Err(Error::Sequence {
                op: OP,
                what: "the optimizer exists already: shard before creating it".into(),
            });
        }
        self.check_params_range(OP, first, len)?;
        self.set_pending_shard(first, len);
        Ok(())
    }

    /// Copies floats `first..first + dst.len()` of the flat parameter
    /// layout into `dst`.
    pub fn params_copy_out(&self, first: usize, dst: &mut [f32]) -> Result<()> {
        const OP: &str = "params_copy_out";
        self.check_params_range(OP, first, dst.len())?;
        let mut done = 0;
        self.params_in_range(first, dst.len(), |p, lo, hi| {
            let src = &self.read_only(self.entry(p).data)[lo..hi];
            dst[done..done + src.len()].copy_from_slice(src);
            done += src.len();
        });
        Ok(())
    }

    /// Overwrites floats `first..first + src.len()` of the flat parameter
    /// layout with `src` (e.g. the slices other processes updated).
    pub fn params_copy_in(&mut self, first: usize, src: &[f32]) -> Result<()> {
        const OP: &str = "params_copy_in";
        self.check_params_range(OP, first, src.len())?;
        let mut at = 0;
        let mut offset = 0;
        for p in 0..self.param_count() as u32 {
            let data = self.entry(p).data;
            let n = data.len();
            let (lo, hi) = (
                first.clamp(offset, offset + n) - offset,
                (first + src.len()).clamp(offset, offset + n) - offset,
            );
            offset += n;
            if hi > lo {
                self.access_one(data)[lo..hi].copy_from_slice(&src[at..at + hi - lo]);
                at += hi - lo;
            }
        }
        Ok(())
    }

    /// Calls `f(param, lo, hi)` for each parameter's part `lo..hi` inside
    /// floats `first..first + len`, in order.
    fn params_in_range(&self, first: usize, len: usize, mut f: impl FnMut(u32, usize, usize)) {
        let mut offset = 0;
        for p in 0..self.param_count() as u32 {
            let n = self.entry(p).shape.numel();
            let lo = first.clamp(offset, offset + n) - offset;
            let hi = (first + len).clamp(offset, offset + n) - offset;
            offset += n;
            if hi > lo {
                f(p, lo, hi);
            }
        }
    }
}

impl Context {
    /// Floats `first..first + len` must lie inside the parameters.
    pub(crate) fn check_params_range(
        &self,
        op: &'static str,
        first: usize,
        len: usize,
    ) -> Result<()> {
        let total = self.grads_len();
        match first.checked_add(len) {
            Some(end) if end <= total => Ok(()),
            _ => Err(Error::InvalidArgument {
                op,
                what: format!("floats {first}..{first}+{len} pass the parameters' {total} floats"),
            }),
        }
    }
}

/// Optimizer moments, read and written by float range of the flat
/// parameter layout (the unsharded one): what a data-parallel caller
/// gathers to save a sharded optimizer in the unsharded checkpoint format.
impl Context {
    /// Moments per float the optimizer keeps, as its kind's row says (0
    /// without an optimizer). Taken from the kind, not the state, which a
    /// shard may leave empty for some parameters.
    pub(crate) fn optimizer_moments(&self) -> usize {
        self.optimizer_state().map_or(0, |o| o.kind().row().moments)
    }

    /// Moment `which` (0 first, 1 second) of floats `first..first + len`
    /// must exist and lie inside the optimizer's shard.
    pub(crate) fn check_state_range(
        &self,
        op: &'static str,
        which: usize,
        first: usize,
        len: usize,
    ) -> Result<()> {
        let Some(o) = self.optimizer_state() else {
            return Err(Error::Sequence {
                op,
                what: "the context has no optimizer".into(),
            });
        };
        let moments = self.optimizer_moments();
        if which >= moments {
            return Err(Error::InvalidArgument {
                op,
                what: format!("moment {which}: the optimizer keeps {moments}"),
            });
        }
        let (lo, hi) = o.shard();
        match first.checked_add(len) {
            Some(end) if first >= lo && end <= hi => Ok(()),
            _ => Err(Error::InvalidArgument {
                op,
                what: format!(
                    "floats {first}..{first}+{len} pass the optimizer's shard {lo}..{hi}"
                ),
            }),
        }
    }

    /// The state buffer of moment `which` for each parameter's part
    /// `lo..hi` inside floats `first..first + len`, with `lo..hi` made
    /// relative to the buffer (which starts where the shard meets the
    /// parameter), in order. The range must be checked first.
    fn state_parts(&self, which: usize, first: usize, len: usize) -> Vec<(Buf, usize, usize)> {
        let mut parts = Vec::new();
        let Some(o) = self.optimizer_state() else {
            return parts;
        };
        let mut offset = 0;
        for p in 0..self.param_count() {
            let n = self.entry(p as u32).shape.numel();
            let part = |x: usize| x.clamp(offset, offset + n) - offset;
            let (lo, hi, start) = (part(first), part(first + len), part(o.shard().0));
            offset += n;
            if let (true, Some(b)) = (hi > lo, o.moments(p)[which]) {
                parts.push((b, lo - start, hi - start));
            }
        }
        parts
    }

    /// Copies moment `which` (0 first, 1 second) of floats `first..first +
    /// dst.len()` of the flat parameter layout into `dst`. The range must lie
    /// inside the optimizer's shard (all floats when it is unsharded).
    pub fn optimizer_state_copy_out(
        &self,
        which: usize,
        first: usize,
        dst: &mut [f32],
    ) -> Result<()> {
        const OP: &str = "optimizer_state_copy_out";
        self.check_state_range(OP, which, first, dst.len())?;
        let mut done = 0;
        for (b, lo, hi) in self.state_parts(which, first, dst.len()) {
            dst[done..done + hi - lo].copy_from_slice(&self.read_only(b)[lo..hi]);
            done += hi - lo;
        }
        Ok(())
    }

    /// Overwrites moment `which` of floats `first..first + src.len()` with
    /// `src`; the range must lie inside the optimizer's shard.
    pub fn optimizer_state_copy_in(
        &mut self,
        which: usize,
        first: usize,
        src: &[f32],
    ) -> Result<()> {
        const OP: &str = "optimizer_state_copy_in";
        self.check_state_range(OP, which, first, src.len())?;
        let mut done = 0;
        for (b, lo, hi) in self.state_parts(which, first, src.len()) {
            self.access_one(b)[lo..hi].copy_from_slice(&src[done..done + hi - lo]);
            done += hi - lo;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{Context, OptimizerKind};

    const ADAMW: OptimizerKind = OptimizerKind::AdamW {
        lr: 1e-2,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.1,
    };

    /// Three parameters (one without decay); every float's value depends
    /// on its index.
    fn model(c: &mut Context) -> [crate::Tensor; 3] {
        let v = |n: usize, s: f32| {
            (0..n)
                .map(|i| (i as f32 * 0.37 + s).sin())
                .collect::<Vec<_>>()
        };
        let a = c.param(&[3, 4], Some(&v(12, 0.1))).unwrap();
        let b = c.param(&[5], Some(&v(5, 0.2))).unwrap();
        let d = c.param(&[2, 3], Some(&v(6, 0.3))).unwrap();
        c.set_weight_decay(b, false).unwrap();
        [a, b, d]
    }

    fn step(c: &mut Context, ps: [crate::Tensor; 3], k: usize) {
        c.reset();
        let mut loss = None;
        for p in ps {
            let s = c.tanh(p).unwrap();
            let s = c.mul(s, s).unwrap();
            let s = c.sum(s).unwrap();
            loss = Some(match loss {
                None => s,
                Some(l) => c.add(l, s).unwrap(),
            });
        }
        c.backward(loss.unwrap()).unwrap();
        c.clip_grad_norm(0.5 + k as f32).unwrap();
        c.optimizer_step().unwrap();
        c.zero_grad();
    }

    /// Two shards split inside a parameter, stepped side by side with the
    /// slices exchanged after each step, equal the unsharded optimizer bit
    /// for bit, with half the state each.
    #[test]
    fn two_shards_equal_one_optimizer() {
        let mut whole = Context::new();
        let pw = model(&mut whole);
        whole.optimizer(ADAMW).unwrap();
        let n = whole.grads_len();
        let cut = 7; // inside the first parameter
        let mut shards: Vec<(Context, [crate::Tensor; 3], usize, usize)> =
            [(0, cut), (cut, n - cut)]
                .into_iter()
                .map(|(first, len)| {
                    let mut c = Context::new();
                    let ps = model(&mut c);
                    c.optimizer_shard(first, len).unwrap();
                    c.optimizer(ADAMW).unwrap();
                    (c, ps, first, len)
                })
                .collect();
        // Two moments of 4 bytes per float of the shard, each buffer padded
        // to 64 bytes (so the parts add up to a little more than the whole).
        let bytes = |c: &Context| c.memory_stats().optimizer_bytes;
        let padded = |floats: u64| floats.div_ceil(16) * 64 * 2;
        assert_eq!(bytes(&whole), padded(12) + padded(5) + padded(6));
        assert_eq!(bytes(&shards[0].0), padded(7));
        assert_eq!(bytes(&shards[1].0), padded(5) + padded(5) + padded(6));
        let mut all = vec![0.0f32; n];
        for k in 0..5 {
            step(&mut whole, pw, k);
            for (c, ps, first, len) in shards.iter_mut() {
                step(c, *ps, k);
                c.params_copy_out(*first, &mut all[*first..*first + *len])
                    .unwrap();
            }
            for (c, ..) in shards.iter_mut() {
                c.params_copy_in(0, &all).unwrap();
            }
            let mut want = vec![0.0f32; n];
            whole.params_copy_out(0, &mut want).unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&all), bits(&want), "step {k}");
        }
    }

    #[test]
    fn ranges_and_sequence_are_checked() {
        let mut c = Context::new();
        model(&mut c);
        let n = c.grads_len();
        assert!(c.optimizer_shard(n, 1).is_err());
        assert!(c.optimizer_shard(usize::MAX, 2).is_err());
        let mut buf = vec![0.0; 2];
        assert!(c.params_copy_out(n - 1, &mut buf).is_err());
        assert!(c.params_copy_in(n - 1, &buf).is_err());
        c.optimizer_shard(n, 0).unwrap();
        c.optimizer(ADAMW).unwrap();
        assert_eq!(c.memory_stats().optimizer_bytes, 0);
        let e = c.optimizer_shard(0, n).unwrap_err();
        assert!(e.to_string().contains("before creating"), "{e}");
        assert!(
            c.checkpoint_bytes(&[]).is_err(),
            "a sharded checkpoint is refused (gather it)"
        );
    }

    /// Two shards gather their moments into the unsharded layout: the file
    /// written from them is the unsharded optimizer's byte for byte, and it
    /// loads back into either shard (which keeps its slice) and into one
    /// context.
    #[test]
    fn gathered_checkpoint_equals_unsharded_and_loads_into_shards() {
        let mut whole = Context::new();
        let pw = model(&mut whole);
        whole.optimizer(ADAMW).unwrap();
        let n = whole.grads_len();
        let cut = 14; // inside the second parameter
        let mut shards: Vec<_> = [(0, cut), (cut, n - cut)]
            .into_iter()
            .map(|(first, len)| {
                let mut c = Context::new();
                let ps = model(&mut c);
                c.optimizer_shard(first, len).unwrap();
                c.optimizer(ADAMW).unwrap();
                (c, ps, first, len)
            })
            .collect();
        let mut all = vec![0.0f32; n];
        for k in 0..3 {
            step(&mut whole, pw, k);
            for (c, ps, first, len) in shards.iter_mut() {
                step(c, *ps, k);
                c.params_copy_out(*first, &mut all[*first..*first + *len])
                    .unwrap();
            }
            for (c, ..) in shards.iter_mut() {
                c.params_copy_in(0, &all).unwrap();
            }
        }
        let mut gathered = vec![f32::NAN; 2 * n];
        for (c, _, first, len) in &shards {
            for which in 0..2 {
                let at = which * n + first;
                c.optimizer_state_copy_out(which, *first, &mut gathered[at..at + len])
                    .unwrap();
            }
        }
        let mut unsharded = vec![0.0f32; 2 * n];
        for which in 0..2 {
            whole
                .optimizer_state_copy_out(which, 0, &mut unsharded[which * n..][..n])
                .unwrap();
        }
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&gathered), bits(&unsharded));
        let want = whole.checkpoint_bytes(b"user").unwrap();
        let got = shards[1]
            .0
            .checkpoint_bytes_gathered(b"user", &gathered)
            .unwrap();
        assert!(
            got == want,
            "gathered checkpoint differs from the unsharded one"
        );
        // Into fresh shards (and a fresh whole): the slices come back.
        for (first, len) in [(0, cut), (cut, n - cut), (3, 5), (0, n)] {
            let mut c = Context::new();
            model(&mut c);
            c.optimizer_shard(first, len).unwrap();
            c.optimizer(ADAMW).unwrap();
            assert_eq!(c.checkpoint_load_bytes(&want).unwrap(), b"user");
            assert_eq!(c.optimizer_step_count(), whole.optimizer_step_count());
            for which in 0..2 {
                let mut m = vec![0.0f32; len];
                c.optimizer_state_copy_out(which, first, &mut m).unwrap();
                assert_eq!(bits(&m), bits(&unsharded[which * n + first..][..len]));
            }
            let mut p = vec![0.0f32; n];
            c.params_copy_out(0, &mut p).unwrap();
            assert_eq!(bits(&p), bits(&all));
        }
    }

    #[test]
    fn state_ranges_moments_and_round_trip() {
        let mut c = Context::new();
        model(&mut c);
        let n = c.grads_len();
        let mut buf = vec![0.0f32; 4];
        let e = c.optimizer_state_copy_out(0, 0, &mut buf).unwrap_err();
        assert!(e.to_string().contains("no optimizer"), "{e}");
        c.optimizer_shard(5, 10).unwrap();
        c.optimizer(ADAMW).unwrap();
        // Outside the shard on either side, past the end, a third moment.
        for (which, first) in [(0, 4), (0, 12), (1, usize::MAX), (2, 5)] {
            let e = c
                .optimizer_state_copy_out(which, first, &mut buf)
                .unwrap_err();
            assert!(matches!(e, crate::Error::InvalidArgument { .. }), "{e}");
            assert!(c.optimizer_state_copy_in(which, first, &buf).is_err());
        }
        // A range across the first two parameters' boundary (at 12) comes
        // back as written; the rest of the shard stays zero.
        let v = [1.5f32, -2.0, 3.25, 4.0];
        c.optimizer_state_copy_in(1, 10, &v).unwrap();
        c.optimizer_state_copy_out(1, 10, &mut buf).unwrap();
        assert_eq!(buf, v);
        let mut shard = vec![9.0f32; 10];
        c.optimizer_state_copy_out(1, 5, &mut shard).unwrap();
        assert_eq!(shard, [0.0, 0.0, 0.0, 0.0, 0.0, 1.5, -2.0, 3.25, 4.0, 0.0]);
        c.optimizer_state_copy_out(0, 5, &mut shard).unwrap();
        assert!(shard.iter().all(|&x| x == 0.0));
        // The gathered save wants both moments of every float.
        assert!(c.checkpoint_bytes_gathered(&[], &vec![0.0; n]).is_err());
        assert!(c.checkpoint_bytes_gathered(&[], &vec![0.0; 2 * n]).is_ok());
        // SGD without momentum keeps no moment.
        let mut s = Context::new();
        model(&mut s);
        s.optimizer(crate::OptimizerKind::Sgd {
            lr: 0.1,
            momentum: 0.0,
            weight_decay: 0.0,
        })
        .unwrap();
        assert!(s.optimizer_state_copy_out(0, 0, &mut []).is_err());
        assert!(s.checkpoint_bytes_gathered(&[], &[]).is_ok());
    }
}
