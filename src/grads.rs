//! The parameter gradients as one flat array, for callers that combine
//! gradients across processes (data-parallel training: an MPI all-reduce,
//! or any other transport the application owns).
//!
//! Every parameter's gradient lives in one contiguous, 64-byte aligned
//! block, parameter after parameter in creation order (the order of
//! [`Context::param_at`]), each row-major and packed without gaps: the
//! gradient of parameter `i` starts at the sum of the element counts of
//! parameters `0..i`. The block grows while parameters are added (it is
//! re-allocated and the gradients moved) and is trimmed to its exact size
//! once, when the optimizer is created; from then on it never moves until
//! the context is dropped.
//!
//! Sequencing: backward accumulates into the block; a caller that replaces
//! the gradients (e.g. with their average over processes) does so after
//! backward and before [`Context::clip_grad_norm`] and
//! [`Context::optimizer_step`], which then see the replaced values: their
//! finiteness check and the clipping norm are computed from them.

use crate::context::Context;
use crate::error::{Error, Result};

impl Context {
    /// Number of gradient floats: the sum of every parameter's element
    /// count (0 before the first parameter).
    pub fn grads_len(&self) -> usize {
        self.grads_block().map_or(0, |b| b.len())
    }

    /// Every parameter gradient, in parameter order, packed (see the module
    /// docs); empty before the first parameter.
    pub fn grads(&self) -> &[f32] {
        match self.grads_block() {
            Some(b) => self.read_only(b),
            None => &[],
        }
    }

    /// Writable access to every parameter gradient (same layout as
    /// [`Context::grads`]). Whatever is written counts as the gradients of
    /// the next optimizer step: the step re-checks them for NaN and
    /// infinity, and it no longer requires a backward since the last step.
    /// Write before [`Context::clip_grad_norm`], which must see the final
    /// values.
    pub fn grads_mut(&mut self) -> &mut [f32] {
        self.note_grads_written();
        match self.grads_block() {
            Some(b) => self.access_one(b),
            None => &mut [],
        }
    }

    /// Copies every parameter gradient into `dst`, whose length must be
    /// [`Context::grads_len`].
    pub fn grads_copy_out(&self, dst: &mut [f32]) -> Result<()> {
        check_grads_len("grads_copy_out", "dst", dst.len(), self.grads_len())?;
        dst.copy_from_slice(self.grads());
        Ok(())
    }

    /// Replaces every parameter gradient by `src`, whose length must be
    /// [`Context::grads_len`]; the values then count as written through
    /// [`Context::grads_mut`]. On a length error nothing changes.
    pub fn grads_copy_in(&mut self, src: &[f32]) -> Result<()> {
        check_grads_len("grads_copy_in", "src", src.len(), self.grads_len())?;
        self.grads_mut().copy_from_slice(src);
        Ok(())
    }

    /// The block's address and length for the C boundary (zero-copy); the
    /// caller's writes through it are not seen by the library, hence the
    /// rule in the C documentation: write before clipping.
    pub(crate) fn grads_raw(&mut self) -> Option<(*mut f32, usize)> {
        self.grads_ptr()
    }

    /// Gradients changed outside backward: a finiteness proof made by an
    /// earlier clip no longer holds, and they are now pending for a step.
    fn note_grads_written(&mut self) {
        // Without parameters there is nothing for a step to consume.
        let pending = self.param_count() > 0 || self.grads_pending();
        self.set_grads_pending(pending);
    }
}

/// The length check of the copies (also made by the C wrappers before they
/// touch the caller's pointer).
pub(crate) fn check_grads_len(op: &'static str, arg: &str, got: usize, want: usize) -> Result<()> {
    if got == want {
        return Ok(());
    }
    Err(Error::InvalidArgument {
        op,
        what: format!(
            "{arg} holds {got} floats but the parameter gradients are {want} floats (the sum of every parameter's element count)"
        ),
    })
}

#[cfg(test)]
mod tests {
    use crate::{Context, OptimizerKind};

    fn adamw() -> OptimizerKind {
        OptimizerKind::AdamW {
            lr: 0.1,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        }
    }

    /// A view of a parameter taken before the optimizer shares the
    /// parameter's gradient; the trim at optimizer creation moves the block,
    /// and the view must follow it (it once kept the freed block's address,
    /// found by fuzzing under ASan).
    #[test]
    fn views_taken_before_the_optimizer_follow_the_trimmed_block() {
        let mut c = Context::new();
        let w = c.param(&[100], Some(&[0.5; 100])).unwrap();
        c.param(&[1], Some(&[1.0])).unwrap();
        let before = c.grads_ptr().unwrap().0;
        let v = c.reshape(w, &[10, 10]).unwrap();
        c.optimizer(adamw()).unwrap();
        let after = c.grads_ptr().unwrap().0;
        assert_ne!(before, after, "the trim must move the block here");
        let sq = c.mul(v, v).unwrap();
        let loss = c.sum(sq).unwrap();
        c.backward(loss).unwrap();
        let mut g = vec![0.0f32; 100];
        c.read_grad(w, &mut g).unwrap();
        assert!(g.iter().all(|&x| x == 1.0), "d(sum v^2)/dw = 2w = 1");
        assert_eq!(&c.grads()[..100], &g[..]);
    }

    /// The block is laid out parameter after parameter, survives its moves
    /// (growth while parameters are added, the trim at optimizer creation),
    /// and each parameter's gradient is its own range of it.
    #[test]
    fn block_is_packed_in_parameter_order_and_survives_moves() {
        let mut c = Context::new();
        assert_eq!(c.grads_len(), 0);
        assert!(c.grads().is_empty());
        let sizes = [3usize, 17, 1, 64, 5, 200, 7];
        let mut ps = Vec::new();
        for (k, &n) in sizes.iter().enumerate() {
            ps.push(c.param(&[n], None).unwrap());
            // Mark every gradient so far with its parameter's number.
            let total: usize = sizes[..=k].iter().sum();
            assert_eq!(c.grads_len(), total);
            let mut off = 0;
            for (j, &m) in sizes[..=k].iter().enumerate() {
                c.grads_mut()[off..off + m]
                    .iter_mut()
                    .enumerate()
                    .for_each(|(i, g)| *g = j as f32 * 1000.0 + i as f32);
                off += m;
            }
        }
        let check = |c: &Context| {
            let mut off = 0;
            for (j, (&n, &p)) in sizes.iter().zip(&ps).enumerate() {
                let mut g = vec![0.0; n];
                c.read_grad(p, &mut g).unwrap();
                let want: Vec<f32> = (0..n).map(|i| j as f32 * 1000.0 + i as f32).collect();
                assert_eq!(g, want, "parameter {j}");
                assert_eq!(&c.grads()[off..off + n], &want[..]);
                off += n;
            }
        };
        check(&c);
        let before = c.memory_stats().param_bytes;
        c.optimizer(adamw()).unwrap();
        check(&c);
        assert!(c.memory_stats().param_bytes <= before, "trim never grows");
        let total: usize = sizes.iter().sum();
        // Values and the trimmed gradient block, each padded to 64 bytes.
        let values: usize = sizes.iter().map(|n| (n * 4).div_ceil(64) * 64).sum();
        assert_eq!(
            c.memory_stats().param_bytes as usize,
            values + (total * 4).div_ceil(64) * 64
        );
    }

    #[test]
    fn copy_in_and_out_check_lengths_and_round_trip() {
        let mut c = Context::new();
        c.param(&[2, 3], None).unwrap();
        c.param(&[4], None).unwrap();
        let src: Vec<f32> = (0..10).map(|i| i as f32 - 4.5).collect();
        let e = c.grads_copy_in(&src[..9]).unwrap_err();
        assert!(e.to_string().contains("grads_copy_in"), "{e}");
        assert!(e.to_string().contains("9 floats"), "{e}");
        assert!(
            c.grads().iter().all(|&g| g == 0.0),
            "refused copy changed nothing"
        );
        c.grads_copy_in(&src).unwrap();
        let mut out = vec![0.0; 11];
        assert!(c.grads_copy_out(&mut out).is_err());
        c.grads_copy_out(&mut out[..10]).unwrap();
        assert_eq!(&out[..10], &src[..]);
        c.zero_grad();
        assert!(c.grads().iter().all(|&g| g == 0.0));
    }

    /// A clip proves the gradients finite; a NaN copied in afterwards must
    /// still stop the step, and leave the parameters bit-identical.
    #[test]
    fn copy_in_after_clip_is_checked_by_the_step() {
        let mut c = Context::new();
        let p = c.param(&[4], Some(&[1.0, 2.0, 3.0, 4.0])).unwrap();
        c.optimizer(adamw()).unwrap();
        c.grads_copy_in(&[0.5, 0.5, 0.5, 0.5]).unwrap();
        c.clip_grad_norm(1.0).unwrap();
        c.grads_copy_in(&[0.5, f32::NAN, 0.5, 0.5]).unwrap();
        let e = c.optimizer_step().unwrap_err();
        assert!(e.to_string().contains("NaN"), "{e}");
        let mut v = [0.0; 4];
        c.read(p, &mut v).unwrap();
        assert_eq!(v, [1.0, 2.0, 3.0, 4.0]);
        // Finite gradients written in (no backward ran) make a step.
        c.grads_copy_in(&[1.0, -1.0, 1.0, -1.0]).unwrap();
        c.optimizer_step().unwrap();
        c.read(p, &mut v).unwrap();
        // AdamW's first step moves each value by lr against its gradient's sign.
        for (got, want) in v.iter().zip([0.9f32, 2.1, 2.9, 4.1]) {
            assert!((got - want).abs() < 1e-6, "{v:?}");
        }
    }

    /// The clip sees gradients replaced after backward (e.g. averaged over
    /// processes), not the ones backward produced.
    #[test]
    fn clip_sees_replaced_gradients() {
        let mut c = Context::new();
        let p = c.param(&[2], Some(&[3.0, 4.0])).unwrap();
        let sq = c.mul(p, p).unwrap();
        let loss = c.sum(sq).unwrap();
        c.backward(loss).unwrap();
        assert_eq!(c.grads(), &[6.0, 8.0]);
        c.grads_mut().iter_mut().for_each(|g| *g *= 0.5);
        let norm = c.clip_grad_norm(100.0).unwrap();
        assert_eq!(norm, 5.0);
    }
}
