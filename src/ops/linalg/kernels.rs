//! The dense kernels of the linear-algebra ops, on row-major `[n, n]`
//! matrices in f32 with every sum in f64. They run on the calling thread:
//! the matrices of a statistical model are small, and a fixed order keeps
//! results identical at any thread count.

use super::scan::scan;
use crate::kernels::lanes::dot_f64;

/// L with A = L L^T from the lower triangle of A (the upper one is not
/// read); L's upper triangle is written 0. A matrix that is not positive
/// definite (a pivot <= 0 or NaN) gives a NaN-filled L.
pub(super) fn cholesky(l: &mut [f32], a: &[f32], n: usize) {
    l.fill(0.0);
    for j in 0..n {
        let row_j = j * n;
        let mut d = a[row_j + j] as f64;
        for k in 0..j {
            let v = l[row_j + k] as f64;
            d -= v * v;
        }
        if d.is_nan() || d <= 0.0 {
            l.fill(f32::NAN);
            return;
        }
        let ljj = d.sqrt();
        l[row_j + j] = ljj as f32;
        for i in j + 1..n {
            let row_i = i * n;
            let mut s = a[row_i + j] as f64;
            for k in 0..j {
                s -= l[row_i + k] as f64 * l[row_j + k] as f64;
            }
            l[row_i + j] = (s / ljj) as f32;
        }
    }
}

/// Columns of B handled together by the substitutions: each row's running
/// sums for them stay in one stack array (vector registers), so the
/// column loop is the inner one and vectorises.
const COLUMNS: usize = 64;

/// X = L^{-1} B by forward substitution: L `[n, n]` lower triangular (its
/// upper triangle is not read), B and X `[n, k]`. Each element is
/// b - sum_j l_ij x_j in f64 in the order j = 0, 1, .., then / l_ii.
pub(super) fn solve_lower(x: &mut [f32], l: &[f32], b: &[f32], n: usize, k: usize) {
    let mut s = [0.0f64; COLUMNS];
    for c0 in (0..k).step_by(COLUMNS) {
        let w = COLUMNS.min(k - c0);
        let s = &mut s[..w];
        for i in 0..n {
            for (s, &b) in s.iter_mut().zip(&b[i * k + c0..][..w]) {
                *s = b as f64;
            }
            for j in 0..i {
                let lij = l[i * n + j] as f64;
                for (s, &x) in s.iter_mut().zip(&x[j * k + c0..][..w]) {
                    *s -= lij * x as f64;
                }
            }
            let lii = l[i * n + i] as f64;
            for (x, &s) in x[i * k + c0..][..w].iter_mut().zip(s.iter()) {
                *x = (s / lii) as f32;
            }
        }
    }
}

/// Y = L^{-T} G in place (G, Y `[n, k]`) by back substitution, each element
/// y - sum_{j > i} l_ji y_j in f64 in the order j = i + 1, .., then / l_ii.
pub(super) fn solve_lower_transposed_in_place(y: &mut [f32], l: &[f32], n: usize, k: usize) {
    let mut s = [0.0f64; COLUMNS];
    for c0 in (0..k).step_by(COLUMNS) {
        let w = COLUMNS.min(k - c0);
        let s = &mut s[..w];
        for i in (0..n).rev() {
            for (s, &y) in s.iter_mut().zip(&y[i * k + c0..][..w]) {
                *s = y as f64;
            }
            for j in i + 1..n {
                let lji = l[j * n + i] as f64;
                for (s, &y) in s.iter_mut().zip(&y[j * k + c0..][..w]) {
                    *s -= lji * y as f64;
                }
            }
            let lii = l[i * n + i] as f64;
            for (y, &s) in y[i * k + c0..][..w].iter_mut().zip(s.iter()) {
                *y = (s / lii) as f32;
            }
        }
    }
}

/// Adds `scale` times the gradient of a function of A's lower triangle
/// whose symmetric gradient is S into dA: S_ij + S_ji below the diagonal
/// (one entry stands for both), S_ii on it, nothing above.
fn add_lower_gradient(da: &mut [f32], s: &[f32], n: usize, scale: f64) {
    for i in 0..n {
        for j in 0..i {
            da[i * n + j] += (scale * (s[i * n + j] as f64 + s[j * n + i] as f64)) as f32;
        }
        da[i * n + i] += (scale * s[i * n + i] as f64) as f32;
    }
}

/// dA += the gradient of L = chol(A) given dL, as a function of A's lower
/// triangle: S = L^{-T} Phi(L^T dL) L^{-1}, with Phi the lower triangle
/// and half the diagonal (from dL = L Phi(L^{-1} dA L^{-T})). `work`:
/// `[n, n]` scratch.
pub(super) fn cholesky_backward(da: &mut [f32], dl: &[f32], l: &[f32], work: &mut [f32], n: usize) {
    // Phi(L^T dL), lower triangle only (L's rows below the column).
    for i in 0..n {
        for j in 0..n {
            work[i * n + j] = if j > i {
                0.0
            } else {
                let mut s = 0.0f64;
                for k in i..n {
                    s += l[k * n + i] as f64 * dl[k * n + j] as f64;
                }
                (if i == j { 0.5 * s } else { s }) as f32
            };
        }
    }
    // Y = P L^{-1}, row by row: Y_r L = P_r, i.e. back substitution on L^T.
    for r in 0..n {
        let row = &mut work[r * n..(r + 1) * n];
        for j in (0..n).rev() {
            let mut s = row[j] as f64;
            for k in j + 1..n {
                s -= row[k] as f64 * l[k * n + j] as f64;
            }
            row[j] = (s / l[j * n + j] as f64) as f32;
        }
    }
    // S = L^{-T} Y.
    solve_lower_transposed_in_place(work, l, n, n);
    add_lower_gradient(da, work, n, 1.0);
}

/// W = L^{-1} (lower triangular) into `w`, L lower triangular.
pub(super) fn lower_inverse(w: &mut [f32], l: &[f32], n: usize) {
    w.fill(0.0);
    for c in 0..n {
        for i in c..n {
            let mut s = if i == c { 1.0f64 } else { 0.0 };
            for j in c..i {
                s -= l[i * n + j] as f64 * w[j * n + c] as f64;
            }
            w[i * n + c] = (s / l[i * n + i] as f64) as f32;
        }
    }
}

/// dA += g A^{-1} as a function of A's lower triangle, with A^{-1} =
/// W^T W and W = L^{-1}: the gradient of ln det A.
pub(super) fn log_det_backward(da: &mut [f32], w: &[f32], g: f32, n: usize) {
    for i in 0..n {
        for j in 0..=i {
            // (W^T W)_ij = sum_k W_ki W_kj, W_ki = 0 for k < i.
            let mut s = 0.0f64;
            for k in i..n {
                s += w[k * n + i] as f64 * w[k * n + j] as f64;
            }
            let scale = if i == j { 1.0 } else { 2.0 };
            da[i * n + j] += (g as f64 * scale * s) as f32;
        }
    }
}

/// 2 sum ln L_ii: ln det A from its Cholesky factor (NaN if L is).
pub(super) fn log_det_from_cholesky(l: &[f32], n: usize) -> f32 {
    (2.0 * (0..n).map(|i| (l[i * n + i] as f64).ln()).sum::<f64>()) as f32
}

/// dL += -tril(dB X^T): the gradient of X = L^{-1} B in L, given
/// dB = L^{-T} dX.
pub(super) fn solve_lower_backward_l(dl: &mut [f32], db: &[f32], x: &[f32], n: usize, k: usize) {
    for i in 0..n {
        for j in 0..=i {
            let s = dot_f64(&db[i * k..(i + 1) * k], &x[j * k..(j + 1) * k]);
            dl[i * n + j] -= s as f32;
        }
    }
}

/// x_0 = c_0, x_t = a_t x_{t-1} + c_t over rows of `width` floats; `a` is
/// one element or one per element of `c` (its first row unread). A
/// sequential dependence: one row after another, the columns side by side.
pub(super) fn linear_recurrence(x: &mut [f32], a: &[f32], c: &[f32], width: usize) {
    recurrence::<false>(x, a, c, width);
}

/// The recurrence's backward for c: g_{T-1} = dx_{T-1} and
/// g_t = dx_t + a_{t+1} g_{t+1}, the same recurrence run from the end.
pub(super) fn linear_recurrence_reversed(g: &mut [f32], a: &[f32], dx: &[f32], width: usize) {
    recurrence::<true>(g, a, dx, width);
}

/// [`linear_recurrence`], or with `REV` [`linear_recurrence_reversed`]:
/// the rows taken from the first (x_t from x_{t-1} and a_t) or from the
/// last (x_t from x_{t+1} and a_{t+1}); the coefficient is always the
/// later row's.
fn recurrence<const REV: bool>(x: &mut [f32], a: &[f32], c: &[f32], width: usize) {
    if width == 0 || c.is_empty() {
        return;
    }
    let steps = c.len() / width;
    // The row the recurrence starts from, and the j-th row it reaches.
    let first = if REV { steps - 1 } else { 0 };
    let order = |j: usize| if REV { steps - 1 - j } else { j };
    if width == 1 {
        // One sequence (a time series): a carried value, no row slices.
        let mut p = c[first];
        x[first] = p;
        let (x, c) = if REV {
            (&mut x[..first], &c[..first])
        } else {
            (&mut x[1..], &c[1..])
        };
        if let [a] = a {
            return scan::<REV>(x, c, *a, p);
        }
        // a_t beside x_t going forward, a_{t+1} beside x_t from the end:
        // either way a[1..].
        let steps = x.iter_mut().zip(c).zip(&a[1..]);
        let mut step = |((x, &c), &a): ((&mut f32, &f32), &f32)| {
            p = a * p + c;
            *x = p;
        };
        if REV {
            steps.rev().for_each(&mut step);
        } else {
            steps.for_each(&mut step);
        }
        return;
    }
    let rows = first * width..(first + 1) * width;
    x[rows.clone()].copy_from_slice(&c[rows]);
    for j in 1..steps {
        let t = order(j);
        // Row t, the row before it in the recurrence's order (t - 1, or
        // t + 1 from the end), and the later of the two, whose a it takes.
        let (row, prev) = if REV {
            let (head, later) = x.split_at_mut((t + 1) * width);
            (&mut head[t * width..], &later[..width])
        } else {
            let (done, rest) = x.split_at_mut(t * width);
            (&mut rest[..width], &done[(t - 1) * width..])
        };
        let later = if REV { t + 1 } else { t };
        let c = &c[t * width..][..width];
        if let [a] = a {
            for ((x, &p), &c) in row.iter_mut().zip(prev).zip(c) {
                *x = a * p + c;
            }
        } else {
            let a = &a[later * width..][..width];
            for (((x, &p), &c), &a) in row.iter_mut().zip(prev).zip(c).zip(a) {
                *x = a * p + c;
            }
        }
    }
}

/// da_t += g_t x_{t-1} for t >= 1; one coefficient gets their sum (in f64:
/// T products of either sign).
pub(super) fn linear_recurrence_backward_a(da: &mut [f32], g: &[f32], x: &[f32], width: usize) {
    let later = g.get(width..).unwrap_or(&[]);
    let x = &x[..later.len()]; // x_{t-1} beside g_t
    if let [da] = da {
        *da += dot_f64(later, x) as f32;
    } else {
        let da = da.get_mut(width..).unwrap_or(&mut []);
        for ((d, &g), &x) in da.iter_mut().zip(later).zip(x) {
            *d += g * x;
        }
    }
}
