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

use crate::context::Context;
use crate::error::{Error, Result};

impl Context {
    /// Makes the optimizer created next keep state for, and update, only
    /// floats `first..first + len` of the flat parameter layout (of the
    /// parameters that exist now). Call it after the last parameter and
    /// before the optimizer; a later call replaces the range. Checkpoints
    /// of a sharded optimizer are refused (gather the state first).
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
            "a sharded checkpoint is refused"
        );
    }
}
