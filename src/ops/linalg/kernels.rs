//! The dense kernels of the linear-algebra ops, on row-major `[n, n]`
//! matrices in f32 with every sum in f64. They run on the calling thread:
//! the matrices of a statistical model are small, and a fixed order keeps
//! results identical at any thread count.

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

/// X = L^{-1} B by forward substitution: L `[n, n]` lower triangular (its
/// upper triangle is not read), B and X `[n, k]`.
pub(super) fn solve_lower(x: &mut [f32], l: &[f32], b: &[f32], n: usize, k: usize) {
    for i in 0..n {
        let lii = l[i * n + i] as f64;
        for c in 0..k {
            let mut s = b[i * k + c] as f64;
            for j in 0..i {
                s -= l[i * n + j] as f64 * x[j * k + c] as f64;
            }
            x[i * k + c] = (s / lii) as f32;
        }
    }
}

/// Y = L^{-T} G in place (G, Y `[n, k]`) by back substitution.
pub(super) fn solve_lower_transposed_in_place(y: &mut [f32], l: &[f32], n: usize, k: usize) {
    for i in (0..n).rev() {
        let lii = l[i * n + i] as f64;
        for c in 0..k {
            let mut s = y[i * k + c] as f64;
            for j in i + 1..n {
                s -= l[j * n + i] as f64 * y[j * k + c] as f64;
            }
            y[i * k + c] = (s / lii) as f32;
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
            let mut s = 0.0f64;
            for c in 0..k {
                s += db[i * k + c] as f64 * x[j * k + c] as f64;
            }
            dl[i * n + j] -= s as f32;
        }
    }
}
