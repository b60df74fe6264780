//! Logs and exponentials near their cancellations: log1p, expm1, tanh,
//! softplus and log-sigmoid. Its own room: the f64 log1p here is also the
//! building block of the normal family's log CDF.

/// log(1 + z) in f64 for any z >= -1: u = 1 + z rounds, and the factor
/// z / (u - 1) cancels that rounding to first order (Goldberg's method).
pub(super) fn log1p_f64(z: f64) -> f64 {
    let u = 1.0 + z;
    if u == 1.0 {
        z
    } else if u.is_infinite() {
        u
    } else {
        u.ln() * (z / (u - 1.0))
    }
}

/// The logistic function 1 / (1 + e^-x) in f64 without overflow.
fn sigmoid_f64(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// ln(1 + x), accurate for small |x|; NaN below -1, -inf at -1.
pub fn log1p(x: f32) -> f32 {
    if x.is_nan() || x < -1.0 {
        return f32::NAN;
    }
    log1p_f64(x as f64) as f32
}

/// d/dx log1p = 1 / (1 + x) (1 + x is exact in f64 for |x| >= 2^-29).
pub fn log1p_grad(x: f32) -> f32 {
    (1.0 / (1.0 + x as f64)) as f32
}

/// e^x - 1, accurate for small |x|.
pub fn expm1(x: f32) -> f32 {
    expm1_f64(x as f64) as f32
}

/// e^x - 1 in f64, accurate for small |x| (past |x| = 0.5 the subtraction
/// loses at most a bit).
pub(super) fn expm1_f64(x: f64) -> f64 {
    if x.abs() < 0.5 {
        expm1_small(x)
    } else {
        x.exp() - 1.0
    }
}

/// e^x - 1 = x (1 + x/2 (1 + x/3 (1 + ... (1 + x/17)))) for |x| < 0.5: the
/// first omitted term is below 3e-20 of the result.
fn expm1_small(x: f64) -> f64 {
    let mut s = 1.0;
    let mut k = 17.0;
    while k >= 2.0 {
        s = 1.0 + x / k * s;
        k -= 1.0;
    }
    x * s
}

/// d/dx expm1 = e^x.
pub fn expm1_grad(x: f32) -> f32 {
    (x as f64).exp() as f32
}

/// tanh(x), within half an f32 ulp of the exact value plus about 1e-12
/// relative (libm's tanhf is within 2.2 ulps and, through its expm1f, takes
/// twice as long on a scalar model's dependency chain). (e^{2|x|} - 1) /
/// (e^{2|x|} + 1) in f64: for |x| >= 2^-12 the subtraction keeps a relative
/// error below 5e-13; below that, tanh(x) = x (1 - x^2/3 + ...) rounds to
/// x, and above 16 to +-1. NaN propagates; the sign is x's (so -0 stays -0).
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    if a < TANH_TINY {
        return x;
    }
    if a > 16.0 {
        return 1.0f32.copysign(x);
    }
    let e = (2.0 * a as f64).exp();
    (((e - 1.0) / (e + 1.0)) as f32).copysign(x)
}

/// Below this |x|, tanh(x) rounds to x in f32: x^2 / 3 < 2^-25.
const TANH_TINY: f32 = 1.0 / 4096.0;

/// softplus(x) = ln(1 + e^x) (Stan's log1p_exp), without overflow.
pub fn softplus(x: f32) -> f32 {
    let x = x as f64;
    let y = if x > 0.0 {
        x + log1p_f64((-x).exp())
    } else {
        log1p_f64(x.exp())
    };
    y as f32
}

/// d/dx softplus = sigmoid(x).
pub fn softplus_grad(x: f32) -> f32 {
    sigmoid_f64(x as f64) as f32
}

/// ln sigmoid(x) = -softplus(-x).
pub fn log_sigmoid(x: f32) -> f32 {
    -softplus(-x)
}

/// d/dx log_sigmoid = sigmoid(-x).
pub fn log_sigmoid_grad(x: f32) -> f32 {
    sigmoid_f64(-(x as f64)) as f32
}
