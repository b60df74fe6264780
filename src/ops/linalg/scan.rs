//! A scalar-coefficient linear recurrence, x_t = a x_{t-1} + c_t, on one
//! sequence, forward or from the end (the recurrence's backward). Each
//! step waits on the one before, so the plain loop runs at the latency of
//! a multiply and an add per element; the forms here cut that chain.

/// Elements [`lookahead`] takes per step of its chain.
const AHEAD: usize = 8;

/// The |a| [`lookahead`] and the two-step loops take (or a = 0): a^8
/// then stays between 2^-512 and 2^128, so no power overflows f64 or
/// underflows to 0 (which would make 0 times infinity, NaN, where the
/// recurrence as written carries an infinity on), nor does a^2 in f32.
const MIN_A: f32 = 1.0 / 18446744073709551616.0; // 2^-64
const MAX_A: f32 = 65536.0;

/// x_t = a x_{t-1} + c_t from x_{-1} = `p`, over `x`'s length; with
/// `REV`, the sequence runs from the end: x_t = a x_{t+1} + c_t from
/// x_{len} = `p`.
pub(super) fn scan<const REV: bool>(x: &mut [f32], c: &[f32], a: f32, p: f32) {
    // Outside [MIN_A, MAX_A] (and for NaN), a^2 or a^8 could overflow or
    // underflow where a itself does not: one step at a time.
    if !steps_by_powers(a) {
        one_step_at_a_time::<REV>(x, c, a, p);
    } else if takes_lookahead(x.len(), a) {
        lookahead::<REV>(x, c, a, p);
    } else {
        two_steps_at_a_time::<REV>(x, c, a, p);
    }
}

/// Whether `a` may be raised to the powers the two-step and lookahead
/// forms take (see [`MIN_A`]).
fn steps_by_powers(a: f32) -> bool {
    a == 0.0 || (MIN_A..=MAX_A).contains(&a.abs())
}

/// Whether [`scan`] runs a sequence of `len` with coefficient `a` in the
/// lookahead form.
fn takes_lookahead(len: usize, a: f32) -> bool {
    steps_by_powers(a) && len >= 2 * AHEAD
}

/// [`scan`] as written: x_t = a x_{t-1} + c_t (with `REV`, from the end).
fn one_step_at_a_time<const REV: bool>(x: &mut [f32], c: &[f32], a: f32, mut p: f32) {
    let mut step = |(x, &c): (&mut f32, &f32)| {
        p = a * p + c;
        *x = p;
    };
    if REV {
        x.iter_mut().zip(c).rev().for_each(&mut step);
    } else {
        x.iter_mut().zip(c).for_each(&mut step);
    }
}

/// [`scan`] eight elements per step of its dependent chain, in f64: each
/// block's local recurrence from 0, L_i (off the chain: the next block's
/// does not wait for it), then x_{t+i} = a^i x_t + L_i for the block's
/// elements side by side, rounded once each, and the chain's step
/// x_{t+8} = a^8 x_t + L_8 kept in f64. So each element is within about
/// one rounding of the exact recurrence on the f32 inputs, where the
/// plain f32 loop drifts by up to two per step.
fn lookahead<const REV: bool>(x: &mut [f32], c: &[f32], a: f32, p: f32) {
    let a = a as f64;
    let mut powers = [0.0f64; AHEAD]; // a^1 .. a^8
    let mut power = 1.0;
    for v in &mut powers {
        power *= a;
        *v = power;
    }
    let at = |i: usize| if REV { AHEAD - 1 - i } else { i };
    let mut prev = p as f64;
    let mut block = |x: &mut [f32], c: &[f32]| {
        let mut local = [0.0f64; AHEAD];
        let mut v = 0.0f64;
        for (i, l) in local.iter_mut().enumerate() {
            v = a * v + c[at(i)] as f64;
            *l = v;
        }
        let mut out = [0.0f32; AHEAD];
        for ((o, &w), &l) in out.iter_mut().zip(&powers).zip(&local) {
            *o = (w * prev + l) as f32;
        }
        for (i, &o) in out.iter().enumerate() {
            x[at(i)] = o;
        }
        prev = powers[AHEAD - 1] * prev + local[AHEAD - 1];
    };
    let rest = x.len() % AHEAD;
    if REV {
        let blocks = x.rchunks_exact_mut(AHEAD).zip(c.rchunks_exact(AHEAD));
        blocks.for_each(|(x, c)| block(x, c));
        let tail = x[..rest].iter_mut().zip(&c[..rest]).rev();
        tail.for_each(|(x, &c)| {
            prev = a * prev + c as f64;
            *x = prev as f32;
        });
    } else {
        let blocks = x.chunks_exact_mut(AHEAD).zip(c.chunks_exact(AHEAD));
        blocks.for_each(|(x, c)| block(x, c));
        let n = x.len();
        let tail = x[n - rest..].iter_mut().zip(&c[n - rest..]);
        tail.for_each(|(x, &c)| {
            prev = a * prev + c as f64;
            *x = prev as f32;
        });
    }
}

/// x_t = a x_{t-1} + c_t from x_{-1} = `p`: x_{t+1} = a^2 x_{t-1} +
/// (a c_t + c_{t+1}), so the chain of dependent roundings is half as long
/// (x_t itself is computed beside it), about twice as fast; a few
/// roundings more per pair, the same bound on the error as the plain
/// recurrence's to within a small constant. With `REV`, the mirror image:
/// x_t = a x_{t+1} + c_t from x_{len} = `p`, pairs taken from the end.
fn two_steps_at_a_time<const REV: bool>(x: &mut [f32], c: &[f32], a: f32, mut p: f32) {
    let a2 = a * a;
    let n = x.len();
    // A pair's first and second element in the recurrence's order.
    let (first, second) = if REV { (1, 0) } else { (0, 1) };
    for k in 0..n / 2 {
        let s = if REV { n - 2 * (k + 1) } else { 2 * k };
        let (x, c) = (&mut x[s..s + 2], &c[s..s + 2]);
        x[first] = a * p + c[first];
        p = a2 * p + (a * c[first] + c[second]);
        x[second] = p;
    }
    if n % 2 == 1 {
        let t = if REV { 0 } else { n - 1 };
        x[t] = a * p + c[t];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each form against the recurrence in f64 on the same f32 inputs,
    /// within the plain loop's own bound: after t steps, 2 (t + 1) u of
    /// the recurrence on magnitudes (a product and a sum rounded per step,
    /// u = 2^-24). The lookahead form, in f64 but for its outputs'
    /// rounding, is within u of the result plus 2^-40 of the magnitudes
    /// (a check that it is not the plain loop). Lengths around the
    /// lookahead's threshold and with every remainder, both directions,
    /// a on both sides of 1.
    #[test]
    fn every_form_is_within_the_plain_loops_bound() {
        let u = f32::EPSILON as f64 / 2.0;
        for n in [1, 2, 7, 15, 16, 17, 23, 127, 200, 1001] {
            for a in [0.0f32, -0.5, 0.93, 1.0, -1.0, 0.999, 1.5] {
                for rev in [false, true] {
                    let c: Vec<f32> = (0..n).map(|i| (i as f32 * 0.71).sin() * 2.0).collect();
                    let p = 0.37f32;
                    let mut x = vec![f32::NAN; n];
                    if rev {
                        scan::<true>(&mut x, &c, a, p);
                    } else {
                        scan::<false>(&mut x, &c, a, p);
                    }
                    let order: Vec<usize> = if rev {
                        (0..n).rev().collect()
                    } else {
                        (0..n).collect()
                    };
                    let (mut exact, mut size) = (p as f64, (p as f64).abs());
                    for (t, &k) in order.iter().enumerate() {
                        exact = a as f64 * exact + c[k] as f64;
                        size = (a as f64).abs() * size + (c[k] as f64).abs();
                        if size > f32::MAX as f64 / 4.0 {
                            break; // a = 1.5 has left f32's range
                        }
                        let bound = if takes_lookahead(n, a) {
                            u * exact.abs() + size * 2f64.powi(-40)
                        } else {
                            2.0 * (t + 1) as f64 * u * size
                        };
                        assert!(
                            (x[k] as f64 - exact).abs() <= bound,
                            "n {n} a {a} rev {rev}: x[{k}] = {} vs {exact}",
                            x[k]
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn nan_and_infinity_spread_as_in_the_plain_loop() {
        let n = 300;
        let mut c = vec![1.0f32; n];
        c[50] = f32::INFINITY;
        let mut x = vec![0.0; n];
        scan::<false>(&mut x, &c, 0.5, 0.0);
        assert!(x[..50].iter().all(|v| v.is_finite()));
        assert!(
            x[50..].iter().all(|&v| v == f32::INFINITY),
            "{:?}",
            &x[45..60]
        );
        scan::<false>(&mut x, &c, f32::NAN, 0.0);
        assert!(x.iter().all(|v| v.is_nan()));
        // A coefficient so small that a^2 underflows f32 (a^8 f64) still
        // carries the infinity on (a inf = inf), both ways; and one so
        // large that a^2 overflows f32 leaves a 0 before it a 0 (a 0 = 0).
        for a in [1e-20f32, 1e-30, f32::from_bits(1)] {
            scan::<false>(&mut x, &c, a, 0.0);
            assert!(x[50..].iter().all(|&v| v == f32::INFINITY), "a {a:e}");
            scan::<true>(&mut x, &c, a, 0.0);
            assert!(
                x[..=50].iter().all(|&v| v == f32::INFINITY),
                "a {a:e} reversed"
            );
        }
        // a = 0: each element is its own c, as in the plain loop.
        scan::<false>(&mut x, &c, 0.0, 0.0);
        assert!(x.iter().zip(&c).take(50).all(|(v, c)| v == c));
        let zeros = [0.0f32; 40];
        for len in [5, 40] {
            let mut y = vec![f32::NAN; len];
            scan::<false>(&mut y, &zeros[..len], 1e30, 0.0);
            assert!(y.iter().all(|&v| v == 0.0), "a = 1e30, length {len}: {y:?}");
        }
    }
}
