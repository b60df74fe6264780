//! Inverted dropout: each element is kept with probability 1 - p and scaled
//! by 1 / (1 - p), or set to 0, so the expected value is unchanged and
//! evaluation needs no rescaling.
//!
//! Which elements are kept is a pure function of (seed, element index): a
//! counter-based hash (SplitMix64's mixer), so a seed gives the same mask
//! whatever the thread count or the order elements are visited in, and a
//! caller replays a step exactly by passing the same seed.
//!
//! `dropout` takes the seed by value and draws the mask once, when the op
//! is recorded. `dropout_seeded` reads the seed from a data tensor (an input
//! slot) whenever its forward runs, so a captured step replays with the
//! seed written before each replay, as it does with a new batch.

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

/// Elements of a seed tensor: the seed's four 16-bit limbs, least
/// significant first, each stored as an exact integer in f32.
///
/// Why a tensor, and why limbs: a replayed step reads only its own memory,
/// so a seed that must change between replays has to live in a data tensor
/// the caller rewrites (an input slot), exactly like a batch. Tensors hold
/// f32, which is exact for integers below 2^24, so the u64 is split into
/// 16-bit limbs rather than type-punned: the slot reads back as ordinary
/// numbers, copies never disturb it, and [`seed_from_limbs`] is total (any
/// f32 decodes to some seed, so a replay needs no check).
pub(crate) const SEED_LEN: usize = 4;

/// The limbs of `seed` (see [`SEED_LEN`]).
pub(crate) fn seed_limbs(seed: u64) -> [f32; SEED_LEN] {
    std::array::from_fn(|i| ((seed >> (16 * i)) & 0xffff) as f32)
}

/// The seed whose limbs are `v`. Total: each limb is taken as
/// `(v as u64) & 0xffff` (saturating; NaN is 0), so a slot overwritten with
/// arbitrary floats still gives a deterministic mask. The recording function
/// checks that the limbs are exact, so eager use never relies on that.
pub(crate) fn seed_from_limbs(v: &[f32]) -> u64 {
    v.iter()
        .take(SEED_LEN)
        .enumerate()
        .fold(0, |acc, (i, &l)| acc | (((l as u64) & 0xffff) << (16 * i)))
}

/// Where the limbs of a seed tensor are not integers in [0, 65536): the
/// first bad position and its value.
fn bad_limb(v: &[f32]) -> Option<(usize, f32)> {
    v.iter()
        .position(|&l| !(0.0..65536.0).contains(&l) || l.fract() != 0.0)
        .map(|i| (i, v[i]))
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

impl Context {
    /// Inverted dropout like [`dropout`](Self::dropout), with the seed read
    /// from `seed`, a data tensor of shape `[4]` holding the seed's 16-bit
    /// limbs (an input slot or a constant, written with
    /// [`seed_write`](Self::seed_write)), each time the op's
    /// forward runs. A captured step therefore draws a fresh mask from
    /// whatever seed was written before each replay, a recomputed segment
    /// draws the same mask again from the same seed, and the result for a
    /// seed value does not depend on the path (eager, replayed, recomputed).
    pub fn dropout_seeded(&mut self, x: Tensor, p: f32, seed: Tensor) -> Result<Tensor> {
        const OP: &str = "dropout_seeded";
        let ix = self.resolve(OP, x)?;
        let is = self.resolve(OP, seed)?;
        // Before any allocation: a resident step's memory stays as captured.
        self.check_not_resident(OP)?;
        if !(0.0..1.0).contains(&p) {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!("p = {p} is outside [0, 1)"),
            });
        }
        let (ex, es) = (self.entry(ix), self.entry(is));
        if es.shape.dims() != [SEED_LEN] {
            return Err(Error::BadShape {
                op: OP,
                what: format!(
                    "seed has shape {} (x {}) but a seed tensor has shape [{SEED_LEN}] (make it with ag_input_new, write it with ag_seed_write)",
                    es.shape, ex.shape
                ),
            });
        }
        if !self.is_data(is) {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!(
                    "seed (tensor {}) is computed or a parameter; it must be data the caller writes (ag_input_new, ag_tensor_new)",
                    seed.index
                ),
            });
        }
        if let Some((i, v)) = bad_limb(self.access_one(es.data)) {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!(
                    "seed element {i} is {v}; a seed holds four 16-bit limbs, integers in [0, 65536) (write it with ag_seed_write)"
                ),
            });
        }
        if !self.grad_enabled() {
            let out = self.push_view(OP, ix, ex.shape)?;
            return Ok(self.handle(out));
        }
        let tracks = self.tracks(&[ix]);
        // Drawn again by every forward run, so (unlike `dropout`'s mask)
        // it may sit in a recomputed segment's scratch: its replay redraws
        // it from the seed, which is data and lives outside the scratch.
        let scale = if tracks {
            self.alloc_scratchable::<f32>(OP, ex.shape.numel())?
        } else {
            self.alloc_main::<f32>(OP, ex.shape.numel())?
        };
        let out = self.push_output(OP, ex.shape, tracks)?;
        Ok(self.run(
            Op::DropoutSeeded {
                x: ix,
                seed: is,
                p,
                scale,
            },
            out,
        ))
    }

    /// Writes `value` into seed tensor `seed` (its four 16-bit limbs), as
    /// [`input_write`](Self::input_write) writes data: a seed of a captured
    /// step that is not the current iteration makes it current first.
    pub fn seed_write(&mut self, seed: Tensor, value: u64) -> Result<()> {
        const OP: &str = "seed_write";
        // A seed of the current iteration: its shape, named plainly (a
        // captured step's seed is checked by the write as any slot).
        if let Ok(id) = self.resolve(OP, seed)
            && self.entry(id).shape.dims() != [SEED_LEN]
        {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!(
                    "tensor {} has shape {}; a seed tensor has shape [{SEED_LEN}]",
                    seed.index,
                    self.entry(id).shape
                ),
            });
        }
        self.write_data(OP, seed, &seed_limbs(value))
    }
}

pub(crate) fn forward_dropout_seeded(
    ctx: &mut Context,
    out: u32,
    x: u32,
    seed: u32,
    p: f32,
    scale: Buf,
) {
    let value = {
        let es = ctx.entry(seed);
        seed_from_limbs(ctx.access_one(es.data))
    };
    dropout_mask(ctx.access_one(scale), p, value);
    forward_dropout(ctx, out, x, scale);
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

    /// A seed tensor holding `value`, in the current iteration.
    fn seed(c: &mut crate::Context, value: u64) -> crate::Tensor {
        let s = c.input_new(&[super::SEED_LEN]).unwrap();
        c.seed_write(s, value).unwrap();
        s
    }

    #[test]
    fn seed_limbs_round_trip_exactly() {
        for v in [0, 1, 0xffff, 0x1_0000, 0xdead_beef_0bad_f00d, u64::MAX] {
            let l = super::seed_limbs(v);
            assert!(super::bad_limb(&l).is_none());
            assert_eq!(super::seed_from_limbs(&l), v);
        }
        // Total on any floats: a deterministic seed, no panic.
        let odd = [f32::NAN, -3.0, 1e30, 0.5];
        assert_eq!(
            super::seed_from_limbs(&odd),
            super::seed_from_limbs(&odd),
            "deterministic"
        );
    }

    #[test]
    fn seeded_mask_is_the_by_value_mask_of_the_slot_value() {
        let mut c = crate::Context::new();
        let x: Vec<f32> = (0..777).map(|i| i as f32 * 0.25 - 3.0).collect();
        for (p, v) in [(0.5f32, 7u64), (0.1, u64::MAX), (0.9, 0x1234_5678_9abc)] {
            let want = run(&mut c, &x, p, v);
            let t = c.tensor(&[x.len()], &x).unwrap();
            let s = seed(&mut c, v);
            let y = c.dropout_seeded(t, p, s).unwrap();
            let mut got = vec![0.0; x.len()];
            c.read(y, &mut got).unwrap();
            assert_eq!(bits(&got), bits(&want), "p {p} seed {v:#x}");
            // The slot is read when the op runs: a new value, a new mask.
            c.seed_write(s, v ^ 1).unwrap();
            let y2 = c.dropout_seeded(t, p, s).unwrap();
            c.read(y2, &mut got).unwrap();
            assert_ne!(bits(&got), bits(&want), "p {p}: seed rewritten");
            c.reset();
        }
    }

    fn bits(v: &[f32]) -> Vec<u32> {
        v.iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn seeded_bad_inputs_name_the_op_and_shapes() {
        let mut c = crate::Context::new();
        let p4 = c.param(&[4], Some(&[0.0; 4])).unwrap();
        let x = c.tensor(&[2, 3], &[1.0; 6]).unwrap();
        let s = seed(&mut c, 5);
        let err = |c: &mut crate::Context, x, p, s| c.dropout_seeded(x, p, s).unwrap_err();
        let before = c.memory_stats().arena_used_bytes;
        for p in [1.0, -0.1, f32::NAN] {
            let e = err(&mut c, x, p, s).to_string();
            assert!(
                e.contains("dropout_seeded: p =") && e.contains("[0, 1)"),
                "{e}"
            );
        }
        assert_eq!(
            c.memory_stats().arena_used_bytes,
            before,
            "nothing allocated"
        );
        // Wrong shape: a [3] slot, a [2, 2] slot.
        for shape in [&[3][..], &[2, 2]] {
            let bad = c.input_new(shape).unwrap();
            let e = err(&mut c, x, 0.5, bad);
            assert!(matches!(e, crate::Error::BadShape { .. }), "{e:?}");
            let m = e.to_string();
            assert!(
                m.contains("dropout_seeded: seed has shape")
                    && m.contains("(x [2,3])")
                    && m.contains("shape [4]"),
                "{m}"
            );
            let e = c.seed_write(bad, 1).unwrap_err().to_string();
            assert!(
                e.contains("seed_write: tensor") && e.contains("shape [4]"),
                "{e}"
            );
        }
        // Not data: a computed tensor, a parameter of shape [4].
        let computed = c.scale(s, 1.0).unwrap();
        for t in [computed, p4] {
            let e = err(&mut c, x, 0.5, t);
            assert!(matches!(e, crate::Error::InvalidArgument { .. }), "{e:?}");
            assert!(
                e.to_string().contains("must be data the caller writes"),
                "{e}"
            );
        }
        // Values that are not limbs (the f32 analog of a wrong dtype).
        for v in [
            [0.5, 0.0, 0.0, 0.0],
            [0.0, -1.0, 0.0, 0.0],
            [0.0, 0.0, 65536.0, 0.0],
        ] {
            c.input_write(s, &v).unwrap();
            let e = err(&mut c, x, 0.5, s).to_string();
            assert!(
                e.contains("dropout_seeded: seed element") && e.contains("16-bit limbs"),
                "{e}"
            );
        }
        let before = c.memory_stats().arena_used_bytes;
        let _ = err(&mut c, x, 0.5, s);
        assert_eq!(
            c.memory_stats().arena_used_bytes,
            before,
            "nothing allocated"
        );
        // A stale seed (or x) handle from the last iteration.
        c.seed_write(s, 5).unwrap();
        c.reset();
        let x2 = c.tensor(&[2, 3], &[1.0; 6]).unwrap();
        let e = err(&mut c, x2, 0.5, s);
        assert!(matches!(e, crate::Error::StaleHandle { .. }), "{e:?}");
        assert!(matches!(
            c.seed_write(s, 1),
            Err(crate::Error::StaleHandle { .. })
        ));
    }

    #[test]
    fn seeded_grad_off_is_an_identity_view() {
        let mut c = crate::Context::new();
        let w = c.param(&[3], Some(&[1.0, -2.0, 3.0])).unwrap();
        let s = seed(&mut c, 3);
        c.set_grad_enabled(false);
        let before = c.memory_stats();
        let y = c.dropout_seeded(w, 0.9, s).unwrap();
        assert_eq!(c.memory_stats().tape_len, before.tape_len);
        let mut v = [0.0; 3];
        c.read(y, &mut v).unwrap();
        assert_eq!(v, [1.0, -2.0, 3.0]);
    }

    #[test]
    fn gradcheck_dropout_seeded() {
        for p in [0.0, 0.3, 0.6] {
            gradcheck(Check::new("dropout_seeded", &[&[3, 7]]), |c, x| {
                let s = seed(c, 1234);
                c.dropout_seeded(x[0], p, s)
            });
        }
        gradcheck(
            Check::new("dropout_seeded of a product", &[&[4, 5], &[4, 5]]),
            |c, x| {
                let m = c.mul(x[0], x[1])?;
                let s = seed(c, u64::MAX - 3);
                c.dropout_seeded(m, 0.5, s)
            },
        );
    }
}
