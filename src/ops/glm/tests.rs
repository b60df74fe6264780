use crate::Context;
use crate::ops::gradcheck::{Check, gradcheck};
pub(super) use crate::ops::gradcheck::{read, read_grad};

// Helpers both families' tests use.

pub(super) const EPS: f64 = f32::EPSILON as f64;

/// Deterministic values in [-1, 1).
pub(super) fn values(n: usize, seed: f32) -> Vec<f32> {
    (0..n).map(|i| ((i as f32 + seed) * 0.731).sin()).collect()
}

/// v `[rows, cols]` (row-major) as `[cols, rows]`.
pub(super) fn transpose_of(v: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    (0..rows * cols)
        .map(|k| v[(k % rows) * cols + k / rows])
        .collect()
}

/// Our density and gradients against the f64 reference: the density
/// within half an ulp plus `lp_err` (its bound from the f32 residuals);
/// each gradient element (value, its terms' magnitudes, the bound the
/// residuals put on it) within half an ulp, plus the error bound, plus
/// (n / 64 + 14) eps of the magnitudes (a sum over the rows in f32 in 64
/// lanes; the f64 sums are far inside it).
pub(super) fn check_against_f64(
    case: &str,
    names: &[&str],
    n: usize,
    (lp, grads): (f32, &[Vec<f32>]),
    (want, lp_err): (f64, f64),
    want_grads: &[Vec<(f64, f64, f64)>],
) {
    let tol = 0.6 * EPS * want.abs() + lp_err;
    assert!(
        (lp as f64 - want).abs() <= tol,
        "{case}: lp {lp} vs {want} (tol {tol:e})"
    );
    let lanes = (n / 64 + 14) as f64;
    for (k, (got, want)) in grads.iter().zip(want_grads).enumerate() {
        for (i, (&g, &(w, m, err))) in got.iter().zip(want).enumerate() {
            let tol = 0.6 * EPS * w.abs() + lanes * EPS * m + err + 1e-30;
            assert!(
                (g as f64 - w).abs() <= tol,
                "{case}: d{}[{i}] {g} vs {w} (tol {tol:e})",
                names[k]
            );
        }
    }
}

/// `ours()` on the AVX2 and AVX-512 paths (those this CPU has) gives the
/// baseline path's bits, density and gradients.
pub(super) fn same_bits_on_every_level<const K: usize>(ours: impl Fn() -> (f32, [Vec<f32>; K])) {
    use crate::simd::{self, Level};
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    let base = simd::with_level(Level::Baseline, &ours);
    for level in [Level::Avx2Fma, Level::Avx512] {
        if level > simd::detected() {
            continue;
        }
        let got = simd::with_level(level, &ours);
        assert_eq!(got.0.to_bits(), base.0.to_bits(), "{level:?}: lp");
        for (g, b) in got.1.iter().zip(&base.1) {
            assert_eq!(bits(g), bits(b), "{level:?}: a gradient");
        }
    }
}

/// A problem: y [n], X [n, d] (row-major), alpha and sigma of `na` and
/// `ns` elements (1 or n), beta [d].
struct Problem {
    n: usize,
    d: usize,
    y: Vec<f32>,
    x: Vec<f32>,
    alpha: Vec<f32>,
    beta: Vec<f32>,
    sigma: Vec<f32>,
}

impl Problem {
    fn new(n: usize, d: usize, na: usize, ns: usize) -> Problem {
        Problem {
            n,
            d,
            y: values(n, 0.5).iter().map(|v| 3.0 * v).collect(),
            x: values(n * d, 1.5).iter().map(|v| 2.0 * v).collect(),
            alpha: values(na, 2.5),
            beta: values(d, 3.5),
            sigma: values(ns, 4.5)
                .iter()
                .map(|v| 0.6 + 0.5 * v.abs())
                .collect(),
        }
    }

    fn at(v: &[f32], i: usize) -> f64 {
        v[if v.len() == 1 { 0 } else { i }] as f64
    }

    /// The log density and its gradients in f64, with error scales: for
    /// the density, the bound its f32 residuals put on it; for each
    /// gradient, the sum of its terms' magnitudes and the bound the
    /// residuals' error puts on it.
    ///
    /// r_i = y_i - alpha_i - sum_j x_ij beta_j is taken in f32, as a
    /// product and a subtraction would: d products and d + 1 differences,
    /// each rounded (half an ulp of a value at most m_i = |y_i| + |alpha_i|
    /// + sum_j |x_ij beta_j|), so |dr_i| <= (d + 1) eps m_i.
    #[allow(clippy::type_complexity)]
    fn reference(&self) -> ((f64, f64), [Vec<(f64, f64, f64)>; 5]) {
        let (n, d) = (self.n, self.d);
        let (mut lp, mut lp_err) = (0.0, 0.0);
        let mut g: [Vec<(f64, f64, f64)>; 5] = [
            vec![(0.0, 0.0, 0.0); n],
            vec![(0.0, 0.0, 0.0); n * d],
            vec![(0.0, 0.0, 0.0); self.alpha.len()],
            vec![(0.0, 0.0, 0.0); d],
            vec![(0.0, 0.0, 0.0); self.sigma.len()],
        ];
        // slot += v, whose derivative in r_i is dv (its error dv * dr_i).
        let add = |slot: &mut (f64, f64, f64), v: f64, dv: f64, dr: f64| {
            slot.0 += v;
            slot.1 += v.abs();
            slot.2 += dv.abs() * dr;
        };
        for i in 0..n {
            let a = Self::at(&self.alpha, i);
            let (mut mu, mut m) = (a, self.y[i].abs() as f64 + a.abs());
            for j in 0..d {
                let p = self.x[i * d + j] as f64 * self.beta[j] as f64;
                mu += p;
                m += p.abs();
            }
            let dr = (d + 1) as f64 * EPS * m;
            let (s, r) = (Self::at(&self.sigma, i), self.y[i] as f64 - mu);
            lp += -s.ln() - 0.5 * (2.0 * std::f64::consts::PI).ln() - r * r / (2.0 * s * s);
            lp_err += (r.abs() + dr) * dr / (s * s);
            let (w, v) = (r / (s * s), 1.0 / (s * s));
            add(&mut g[0][i], -w, v, dr);
            for j in 0..d {
                let (b, x) = (self.beta[j] as f64, self.x[i * d + j] as f64);
                add(&mut g[1][i * d + j], w * b, v * b, dr);
                add(&mut g[3][j], w * x, v * x, dr);
            }
            let ai = if self.alpha.len() == 1 { 0 } else { i };
            add(&mut g[2][ai], w, v, dr);
            let si = if self.sigma.len() == 1 { 0 } else { i };
            add(
                &mut g[4][si],
                r * r / (s * s * s),
                2.0 * (r.abs() + dr) / (s * s * s),
                dr,
            );
            add(&mut g[4][si], -1.0 / s, 0.0, 0.0);
        }
        ((lp, lp_err), g)
    }

    /// Our log density and gradients (X transposed or not).
    fn ours(&self, transposed: bool) -> (f32, [Vec<f32>; 5]) {
        let mut c = Context::new();
        let (n, d) = (self.n, self.d);
        let x = if transposed {
            c.param(&[d, n], Some(&transpose_of(&self.x, n, d)))
                .unwrap()
        } else {
            c.param(&[n, d], Some(&self.x)).unwrap()
        };
        let y = c.param(&[n], Some(&self.y)).unwrap();
        let a = c.param(&[self.alpha.len()], Some(&self.alpha)).unwrap();
        let b = c.param(&[d], Some(&self.beta)).unwrap();
        let s = c.param(&[self.sigma.len()], Some(&self.sigma)).unwrap();
        let lp = c.normal_id_glm_lpdf(y, x, transposed, a, b, s).unwrap();
        c.backward(lp).unwrap();
        let mut dx = read_grad(&c, x);
        if transposed {
            dx = transpose_of(&dx, d, n); // back to X's [n, d] order
        }
        let grads = [
            read_grad(&c, y),
            dx,
            read_grad(&c, a),
            read_grad(&c, b),
            read_grad(&c, s),
        ];
        (read(&c, lp)[0], grads)
    }
}

#[test]
fn matches_f64_in_both_layouts() {
    for (n, d) in [(1, 1), (7, 3), (64, 2), (65, 1), (437, 4)] {
        for (na, ns) in [(1, 1), (n, 1), (1, n), (n, n)] {
            let p = Problem::new(n, d, na, ns);
            let ((want, lp_err), want_grads) = p.reference();
            for transposed in [false, true] {
                let case = format!("n {n} d {d} alpha {na} sigma {ns} transposed {transposed}");
                let (lp, grads) = p.ours(transposed);
                let names = ["y", "x", "alpha", "beta", "sigma"];
                check_against_f64(&case, &names, n, (lp, &grads), (want, lp_err), &want_grads);
            }
        }
    }
}

#[test]
fn layouts_give_the_same_density() {
    // The same steps in the same order on either layout: the same bits.
    for (n, d) in [(5, 2), (130, 3)] {
        let p = Problem::new(n, d, 1, 1);
        assert_eq!(p.ours(false).0.to_bits(), p.ours(true).0.to_bits());
    }
}

#[test]
fn gradients_check() {
    // sigma from exp so it stays positive; every operand a parameter.
    for (transposed, na, ns) in [(false, 1, 1), (true, 1, 1), (false, 5, 5), (true, 5, 1)] {
        let (n, d) = (5, 3);
        let xs: &[usize] = if transposed { &[d, n] } else { &[n, d] };
        gradcheck(
            Check::new("normal_id_glm_lpdf", &[&[n], xs, &[na], &[d], &[ns]]).range(-1.0, 1.0),
            move |c, v| {
                let s = c.exp(v[4])?;
                c.normal_id_glm_lpdf(v[0], v[1], transposed, v[2], v[3], s)
            },
        );
    }
    // alpha and sigma one shared tensor: both gradients land in it.
    gradcheck(
        Check::new("normal_id_glm_lpdf shared", &[&[4], &[4, 2], &[1], &[2]]).range(-1.0, 1.0),
        |c, v| {
            let s = c.exp(v[2])?;
            c.normal_id_glm_lpdf(v[0], v[1], false, s, v[3], s)
        },
    );
}

#[test]
fn sigma_not_positive_gives_nan() {
    for bad in [0.0f32, -1.0] {
        let mut c = Context::new();
        let y = c.tensor(&[2], &[0.5, 1.0]).unwrap();
        let x = c.tensor(&[2, 1], &[1.0, 2.0]).unwrap();
        let a = c.tensor(&[1], &[0.0]).unwrap();
        let b = c.tensor(&[1], &[0.3]).unwrap();
        let s = c.tensor(&[1], &[bad]).unwrap();
        let lp = c.normal_id_glm_lpdf(y, x, false, a, b, s).unwrap();
        assert!(read(&c, lp)[0].is_nan(), "sigma {bad}");
    }
}

#[test]
fn bad_shapes_name_the_op_and_the_shapes() {
    let mut c = Context::new();
    let mut t = |dims: &[usize]| {
        let n: usize = dims.iter().product();
        c.tensor(dims, &vec![1.0; n]).unwrap()
    };
    let (y, x, xt, one, beta) = (t(&[4]), t(&[4, 2]), t(&[2, 4]), t(&[1]), t(&[2]));
    let (y2, x3, beta3, alpha3) = (t(&[4, 1]), t(&[3, 2]), t(&[3]), t(&[3]));
    let cases = [
        (y2, x, false, one, beta, one, "[4,1]"),
        (y, x3, false, one, beta, one, "[3,2]"),
        (y, x, true, one, beta, one, "[4,2]"),
        (y, xt, false, one, beta, one, "[2,4]"),
        (y, x, false, one, beta3, one, "[3]"),
        (y, x, false, alpha3, beta, one, "[3]"),
        (y, x, false, one, beta, alpha3, "[3]"),
    ];
    for (k, &(y, x, tr, a, b, s, shape)) in cases.iter().enumerate() {
        let m = c
            .normal_id_glm_lpdf(y, x, tr, a, b, s)
            .unwrap_err()
            .to_string();
        assert!(m.contains("normal_id_glm_lpdf"), "case {k}: {m}");
        assert!(m.contains(shape), "case {k}: {m}");
    }
}

#[test]
fn same_bits_on_every_instruction_set() {
    // 200 rows: full blocks, a partial one, lane tails in the dot products.
    let p = Problem::new(200, 5, 1, 1);
    for transposed in [false, true] {
        same_bits_on_every_level(|| p.ours(transposed));
    }
}
