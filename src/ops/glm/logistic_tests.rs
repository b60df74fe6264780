use crate::Context;
use crate::ops::glm::tests::{
    EPS, check_against_f64, read, read_grad, same_bits_on_every_level, transpose_of, values,
};
use crate::ops::gradcheck::{Check, gradcheck};

/// A logistic regression: y in {0, 1} (or a fraction where `soft`), X
/// [n, d] row-major, alpha of `na` elements (1 or n), beta [d].
struct Problem {
    n: usize,
    d: usize,
    y: Vec<f32>,
    x: Vec<f32>,
    alpha: Vec<f32>,
    beta: Vec<f32>,
}

impl Problem {
    fn new(n: usize, d: usize, na: usize, soft: bool) -> Problem {
        let y = values(n, 0.5)
            .iter()
            .map(|&v| {
                if soft {
                    0.5 + 0.5 * v
                } else {
                    (v > 0.0) as u8 as f32
                }
            })
            .collect();
        Problem {
            n,
            d,
            y,
            x: values(n * d, 1.5).iter().map(|v| 3.0 * v).collect(),
            alpha: values(na, 2.5),
            beta: values(d, 3.5).iter().map(|v| 2.0 * v).collect(),
        }
    }

    /// The log mass and the gradients in f64, with error scales: the bound
    /// on the log mass; per gradient slot, its terms' magnitudes and the
    /// bound the saved residuals' errors put on it.
    ///
    /// eta is taken in f32 (d products and d additions after alpha, each
    /// rounded: |d eta| <= (d + 1) eps m, m = |alpha| + sum |x beta|);
    /// each row's mass in f32 within 3 ulps of |eta| + softplus(eta); y -
    /// sigmoid(eta) within 2.5 eps plus
    /// sigmoid' <= 1/4 of eta's error.
    #[allow(clippy::type_complexity)]
    fn reference(&self) -> ((f64, f64), [Vec<(f64, f64, f64)>; 4]) {
        let (n, d) = (self.n, self.d);
        let (mut lp, mut lp_err) = (0.0, 0.0);
        let mut g: [Vec<(f64, f64, f64)>; 4] = [
            vec![(0.0, 0.0, 0.0); n],
            vec![(0.0, 0.0, 0.0); n * d],
            vec![(0.0, 0.0, 0.0); self.alpha.len()],
            vec![(0.0, 0.0, 0.0); d],
        ];
        let add = |slot: &mut (f64, f64, f64), v: f64, err: f64| {
            slot.0 += v;
            slot.1 += v.abs();
            slot.2 += err;
        };
        for i in 0..n {
            let ai = if self.alpha.len() == 1 { 0 } else { i };
            let a = self.alpha[ai] as f64;
            let (mut eta, mut m) = (a, a.abs());
            for j in 0..d {
                let p = self.x[i * d + j] as f64 * self.beta[j] as f64;
                eta += p;
                m += p.abs();
            }
            let d_eta = (d + 1) as f64 * EPS * m;
            let y = self.y[i] as f64;
            let softplus = eta.max(0.0) + (-eta.abs()).exp().ln_1p();
            lp += y * eta - softplus;
            lp_err += d_eta + 4.0 * EPS * (eta.abs() + softplus);
            let res = y - 1.0 / (1.0 + (-eta).exp());
            let d_res = 2.5 * EPS + 0.25 * d_eta;
            add(&mut g[0][i], eta, d_eta);
            for j in 0..d {
                let (b, x) = (self.beta[j] as f64, self.x[i * d + j] as f64);
                add(&mut g[1][i * d + j], res * b, b.abs() * d_res);
                add(&mut g[3][j], res * x, x.abs() * d_res);
            }
            add(&mut g[2][ai], res, d_res);
        }
        ((lp, lp_err), g)
    }

    /// Our log mass and gradients (X transposed or not).
    fn ours(&self, transposed: bool) -> (f32, [Vec<f32>; 4]) {
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
        let lp = c.bernoulli_logit_glm_lpmf(y, x, transposed, a, b).unwrap();
        c.backward(lp).unwrap();
        let mut dx = read_grad(&c, x);
        if transposed {
            dx = transpose_of(&dx, d, n);
        }
        let grads = [read_grad(&c, y), dx, read_grad(&c, a), read_grad(&c, b)];
        (read(&c, lp)[0], grads)
    }
}

#[test]
fn matches_f64_in_both_layouts() {
    for (n, d) in [(1, 1), (7, 3), (64, 2), (65, 1), (437, 4)] {
        for (na, soft) in [(1, false), (n, false), (1, true)] {
            let p = Problem::new(n, d, na, soft);
            let ((want, lp_err), want_grads) = p.reference();
            for transposed in [false, true] {
                let case = format!("n {n} d {d} alpha {na} soft {soft} transposed {transposed}");
                let (lp, grads) = p.ours(transposed);
                let names = ["y", "x", "alpha", "beta"];
                check_against_f64(&case, &names, n, (lp, &grads), (want, lp_err), &want_grads);
            }
        }
    }
}

#[test]
fn layouts_and_instruction_sets_give_the_same_bits() {
    let p = Problem::new(200, 5, 1, false);
    assert_eq!(
        p.ours(true).0.to_bits(),
        p.ours(false).0.to_bits(),
        "layouts: lp"
    );
    for transposed in [false, true] {
        same_bits_on_every_level(|| p.ours(transposed));
    }
}

#[test]
fn far_logits_stay_finite() {
    // eta = +-100: the mass of the wrong label is -100, of the right one
    // about -e^-100 (0 in f32); the gradients y - sigmoid(eta) are 1, 0.
    let mut c = Context::new();
    let b = c.param(&[1], Some(&[100.0])).unwrap();
    let y = c.tensor(&[4], &[1.0, 0.0, 1.0, 0.0]).unwrap();
    let x = c.tensor(&[4, 1], &[-1.0, 1.0, 1.0, -1.0]).unwrap();
    let a = c.tensor(&[1], &[0.0]).unwrap();
    let lp = c.bernoulli_logit_glm_lpmf(y, x, false, a, b).unwrap();
    assert_eq!(read(&c, lp)[0], -200.0);
    c.backward(lp).unwrap();
    // d/dbeta = sum x (y - sigmoid(eta)) = -1 * 1 + 1 * -1 + 0 + 0
    assert_eq!(read_grad(&c, b)[0], -2.0);
}

#[test]
fn gradients_check() {
    for (transposed, na) in [(false, 1), (true, 1), (false, 5), (true, 5)] {
        let (n, d) = (5, 3);
        let xs: &[usize] = if transposed { &[d, n] } else { &[n, d] };
        gradcheck(
            Check::new("bernoulli_logit_glm_lpmf", &[&[n], xs, &[na], &[d]]).range(-1.0, 1.0),
            move |c, v| c.bernoulli_logit_glm_lpmf(v[0], v[1], transposed, v[2], v[3]),
        );
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
    let (y2, beta3, alpha3) = (t(&[4, 1]), t(&[3]), t(&[3]));
    let cases = [
        (y2, x, false, one, beta, "[4,1]"),
        (y, x, true, one, beta, "[4,2]"),
        (y, xt, false, one, beta, "[2,4]"),
        (y, x, false, one, beta3, "[3]"),
        (y, x, false, alpha3, beta, "[3]"),
    ];
    for (k, &(y, x, tr, a, b, shape)) in cases.iter().enumerate() {
        let m = c
            .bernoulli_logit_glm_lpmf(y, x, tr, a, b)
            .unwrap_err()
            .to_string();
        assert!(m.contains("bernoulli_logit_glm_lpmf"), "case {k}: {m}");
        assert!(m.contains(shape), "case {k}: {m}");
    }
}
