//! Inverted dropout: each element is kept with probability 1 - p and scaled
//! by 1 / (1 - p), or set to 0, so the expected value is unchanged and
//! evaluation needs no rescaling.
//!
//! Which elements are kept is a pure function of (seed, element index): a
//! counter-based hash (SplitMix64's mixer), so a seed gives the same mask
//! whatever the thread count or the order elements are visited in, and a
//! caller replays a step exactly by passing the same seed.

use crate::arena::Buf;
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::ops::Op;
use crate::rng::{GAMMA, mix};

/// Separates dropout's stream from the initialisers' streams of the same seed.
const DOMAIN: u64 = 0x6472_6f70_6f75_7431; // "dropout1"

/// Uniform in [0, 1) with 24 bits (exact in f32) for element `i` of the
/// mask of `seed`.
fn uniform(key: u64, i: u64) -> f32 {
    let w = mix(key.wrapping_add(i.wrapping_add(1).wrapping_mul(GAMMA)));
    (w >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
}

/// scale[i] = 1 / (1 - p) if element i is kept (uniform >= p), else 0.
fn dropout_mask(scale: &mut [f32], p: f32, seed: u64) {
    let key = mix(seed ^ DOMAIN);
    let keep = (1.0 / (1.0 - p as f64)) as f32;
    for (i, s) in scale.iter_mut().enumerate() {
        *s = if uniform(key, i as u64) >= p {
            keep
        } else {
            0.0
        };
    }
}

/// y = x * scale. x, y, scale: `[N]`.
fn dropout_forward(y: &mut [f32], x: &[f32], scale: &[f32]) {
    for ((y, &x), &s) in y.iter_mut().zip(x).zip(scale) {
        *y = x * s;
    }
}

/// dx += dout * scale.
fn dropout_backward(dx: &mut [f32], dout: &[f32], scale: &[f32]) {
    for ((d, &g), &s) in dx.iter_mut().zip(dout).zip(scale) {
        *d += g * s;
    }
}

impl Context {
    /// Inverted dropout with drop probability `p` in [0, 1): each element is
    /// zeroed with probability p, the others are scaled by 1 / (1 - p); the
    /// mask depends only on `seed` and the element's index. With grad mode
    /// off this is the identity and copies nothing: the result is a view of
    /// `x` (same memory, no gradient), as for evaluation.
    pub fn dropout(&mut self, x: Tensor, p: f32, seed: u64) -> Result<Tensor> {
        const OP: &str = "dropout";
        let ix = self.resolve(OP, x)?;
        if !(0.0..1.0).contains(&p) {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!("p = {p} is outside [0, 1)"),
            });
        }
        let ex = self.entry(ix);
        if !self.grad_enabled() {
            let out = self.push_view(OP, ix, ex.shape)?;
            return Ok(self.handle(out));
        }
        let n = ex.shape.numel();
        // Drawn from the seed once; kept outside any recomputed segment's
        // scratch, so a replay applies the very same mask.
        let scale = self.alloc_main::<f32>(OP, n)?;
        let tracks = self.tracks(&[ix]);
        let out = self.push_output(OP, ex.shape, tracks)?;
        // The mask is drawn here, once: a replay reuses the saved mask.
        dropout_mask(self.access_one(scale), p, seed);
        Ok(self.run(Op::Dropout { x: ix, scale }, out))
    }
}

pub(crate) fn forward_dropout(ctx: &mut Context, out: u32, x: u32, scale: Buf) {
    let (ex, eo) = (ctx.entry(x), ctx.entry(out));
    let ([y], [x, s]) = ctx.access([eo.data], [ex.data, scale]);
    dropout_forward(y, x, s);
}

pub(crate) fn backward_dropout(ctx: &mut Context, out: u32, x: u32, scale: Buf) {
    let (Some(dx), Some(dout)) = (ctx.grad_of(x), ctx.grad_out(out)) else {
        return;
    };
    let ([dx], [dout, s]) = ctx.access([dx], [dout, scale]);
    dropout_backward(dx, dout, s);
}

#[cfg(test)]
mod tests {
    use crate::ops::gradcheck::{Check, gradcheck};

    fn run(c: &mut crate::Context, x: &[f32], p: f32, seed: u64) -> Vec<f32> {
        let t = c.tensor(&[x.len()], x).unwrap();
        let y = c.dropout(t, p, seed).unwrap();
        let mut v = vec![0.0; x.len()];
        c.read(y, &mut v).unwrap();
        v
    }

    #[test]
    fn kept_fraction_scale_and_determinism() {
        let mut c = crate::Context::new();
        let n = 100_000;
        let ones = vec![1.0f32; n];
        for p in [0.1f32, 0.5, 0.9] {
            let v = run(&mut c, &ones, p, 42);
            let keep = 1.0 / (1.0 - p);
            assert!(v.iter().all(|&y| y == 0.0 || y == keep));
            let kept = v.iter().filter(|&&y| y != 0.0).count() as f64 / n as f64;
            // Binomial: 5 standard deviations of the kept fraction.
            let sd = ((1.0 - p as f64) * p as f64 / n as f64).sqrt();
            assert!(
                (kept - (1.0 - p as f64)).abs() < 5.0 * sd,
                "p {p}: kept {kept}"
            );
            // The mean is preserved (inverted dropout).
            let mean = v.iter().map(|&y| y as f64).sum::<f64>() / n as f64;
            assert!(
                (mean - 1.0).abs() < 5.0 * sd / (1.0 - p as f64),
                "p {p}: mean {mean}"
            );
            c.reset();
        }
        // Same seed, same mask; another seed, another mask; p = 0 keeps all.
        let x: Vec<f32> = (0..1000).map(|i| i as f32 + 1.0).collect();
        let a = run(&mut c, &x, 0.5, 7);
        let b = run(&mut c, &x, 0.5, 7);
        let d = run(&mut c, &x, 0.5, 8);
        assert_eq!(a, b);
        assert_ne!(a, d);
        assert_eq!(run(&mut c, &x, 0.0, 7), x);
        // A prefix of a tensor gets the prefix of the mask (element index).
        assert_eq!(run(&mut c, &x[..100], 0.5, 7), a[..100]);
    }

    #[test]
    fn bad_p_is_refused_before_allocating() {
        let mut c = crate::Context::new();
        let x = c.tensor(&[4], &[1.0; 4]).unwrap();
        let before = c.memory_stats().arena_used_bytes;
        for p in [1.0, -0.1, 1.5, f32::NAN, f32::INFINITY] {
            let e = c.dropout(x, p, 0).unwrap_err().to_string();
            assert!(
                e.contains("dropout: p =") && e.contains("outside [0, 1)"),
                "{e}"
            );
        }
        assert_eq!(c.memory_stats().arena_used_bytes, before);
    }

    #[test]
    fn grad_off_is_an_identity_view() {
        let mut c = crate::Context::new();
        let w = c.param(&[3], Some(&[1.0, -2.0, 3.0])).unwrap();
        c.set_grad_enabled(false);
        let before = c.memory_stats();
        let y = c.dropout(w, 0.9, 1).unwrap();
        let after = c.memory_stats();
        assert_eq!(after.arena_used_bytes, before.arena_used_bytes, "no copy");
        assert_eq!(after.tape_len, before.tape_len, "nothing recorded");
        let mut v = [0.0; 3];
        c.read(y, &mut v).unwrap();
        assert_eq!(v, [1.0, -2.0, 3.0]);
        assert!(c.read_grad(y, &mut v).is_err(), "no gradient");
    }

    #[test]
    fn gradcheck_dropout() {
        // The mask is fixed by the seed, so finite differences see the same
        // function at every evaluation.
        for p in [0.0, 0.3, 0.6] {
            gradcheck(Check::new("dropout", &[&[3, 7]]), |c, x| {
                c.dropout(x[0], p, 1234)
            });
        }
        gradcheck(
            Check::new("dropout of a product", &[&[4, 5], &[4, 5]]),
            |c, x| {
                let m = c.mul(x[0], x[1])?;
                c.dropout(m, 0.5, 99)
            },
        );
    }
}
