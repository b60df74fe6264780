//! logsumexp over a line of an array, and its gradient (the softmax
//! weights). Its own room: the only functions here that reduce many
//! values, with their own rule for infinite maxima.

/// ln sum_i e^{x_i}, accumulated in f64 after subtracting the maximum.
/// -inf entries add nothing; all -inf (or empty) gives -inf, a +inf entry
/// gives +inf, a NaN entry gives NaN.
#[cfg(test)] // the slice forms; ops call the strided ones
pub fn logsumexp(xs: &[f32]) -> f32 {
    logsumexp_strided(xs, 0, xs.len(), 1)
}

/// The gradient of logsumexp: the softmax weights e^{x_i - lse}, written to
/// `out` (same length as `xs`). When the maximum is infinite (all -inf, or
/// a +inf entry) the weight is shared equally by the entries equal to it,
/// the limit of the softmax of equal values.
#[cfg(test)] // the slice forms; ops call the strided ones
pub fn logsumexp_grad(xs: &[f32], out: &mut [f32]) {
    assert_eq!(xs.len(), out.len(), "logsumexp_grad: lengths differ");
    out.fill(0.0);
    logsumexp_grad_add_strided(out, xs, 0, xs.len(), 1, 1.0);
}

/// [`logsumexp`] of the `n` entries `xs[start + j * stride]` (one line of an
/// axis of a row-major array).
pub fn logsumexp_strided(xs: &[f32], start: usize, n: usize, stride: usize) -> f32 {
    let at = |j: usize| xs[start + j * stride] as f64;
    let (m, _) = max_and_count(n, at);
    if m.is_nan() || m.is_infinite() {
        return m as f32;
    }
    let s: f64 = (0..n).map(|j| (at(j) - m).exp()).sum();
    (m + s.ln()) as f32
}

/// dx[p] += g * w_p over the same entries as [`logsumexp_strided`], with
/// w the weights of [`logsumexp_grad`].
pub fn logsumexp_grad_add_strided(
    dx: &mut [f32],
    xs: &[f32],
    start: usize,
    n: usize,
    stride: usize,
    g: f32,
) {
    let at = |j: usize| xs[start + j * stride] as f64;
    let (m, count) = max_and_count(n, at);
    let g = g as f64;
    let p = |j: usize| start + j * stride;
    if m.is_nan() {
        (0..n).for_each(|j| dx[p(j)] = f32::NAN);
        return;
    }
    if m.is_infinite() {
        let w = 1.0 / count as f64;
        for j in (0..n).filter(|&j| at(j) == m) {
            dx[p(j)] += (g * w) as f32;
        }
        return;
    }
    let s: f64 = (0..n).map(|j| (at(j) - m).exp()).sum();
    for j in 0..n {
        dx[p(j)] += (g * ((at(j) - m).exp() / s)) as f32;
    }
}

/// The maximum of the `n` values `at(j)` (NaN if any is NaN, -inf if
/// n = 0) and how many equal it.
fn max_and_count(n: usize, at: impl Fn(usize) -> f64) -> (f64, usize) {
    let mut m = f64::NEG_INFINITY;
    let mut count = 0;
    for j in 0..n {
        let x = at(j);
        if x.is_nan() {
            return (f64::NAN, 0);
        }
        if x > m {
            m = x;
            count = 1;
        } else if x == m {
            count += 1;
        }
    }
    (m, count.max(1))
}
