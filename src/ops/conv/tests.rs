//! Convolution and pooling: finite-difference gradient checks over several
//! configurations, float64 direct references, PyTorch's output sizes and
//! the errors of bad arguments.

use super::{Conv2dOptions, Pool2dOptions};
use crate::context::{Context, Tensor};
use crate::error::Error;
use crate::ops::gradcheck::{Check, Lcg, gradcheck};

fn opts(stride: usize, pad: usize, dilation: usize, groups: usize) -> Conv2dOptions {
    Conv2dOptions {
        stride: [stride, stride],
        padding: [pad, pad],
        dilation: [dilation, dilation],
        groups,
    }
}

fn pool_opts(k: usize, s: usize, p: usize, ceil_mode: bool) -> Pool2dOptions {
    Pool2dOptions {
        kernel: [k, k],
        stride: [s, s],
        padding: [p, p],
        ceil_mode,
    }
}

/// Direct convolution in f64: x [N, C, H, W], w [Co, C/G, kH, kW].
fn conv_reference(
    x: &[f32],
    xs: [usize; 4],
    w: &[f32],
    ws: [usize; 4],
    bias: Option<&[f32]>,
    o: Conv2dOptions,
) -> (Vec<f64>, [usize; 4]) {
    let [n, c, h, wd] = xs;
    let [co, cg, kh, kw] = ws;
    let ho = (h + 2 * o.padding[0] - o.dilation[0] * (kh - 1) - 1) / o.stride[0] + 1;
    let wo = (wd + 2 * o.padding[1] - o.dilation[1] * (kw - 1) - 1) / o.stride[1] + 1;
    let cog = co / o.groups;
    let mut y = vec![0.0f64; n * co * ho * wo];
    for b in 0..n {
        for oc in 0..co {
            let g = oc / cog;
            for oh in 0..ho {
                for ow in 0..wo {
                    let mut s = bias.map_or(0.0, |b| b[oc] as f64);
                    for ic in 0..cg {
                        let cin = g * cg + ic;
                        for i in 0..kh {
                            for j in 0..kw {
                                let ih = (oh * o.stride[0] + i * o.dilation[0]) as i64
                                    - o.padding[0] as i64;
                                let iw = (ow * o.stride[1] + j * o.dilation[1]) as i64
                                    - o.padding[1] as i64;
                                if ih < 0 || iw < 0 || ih >= h as i64 || iw >= wd as i64 {
                                    continue;
                                }
                                let xv = x[((b * c + cin) * h + ih as usize) * wd + iw as usize];
                                let wv = w[((oc * cg + ic) * kh + i) * kw + j];
                                s += xv as f64 * wv as f64;
                            }
                        }
                    }
                    y[((b * co + oc) * ho + oh) * wo + ow] = s;
                }
            }
        }
    }
    (y, [n, co, ho, wo])
}

fn random(rng: &mut Lcg, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.range(-1.0, 1.0)).collect()
}

fn read(c: &mut Context, t: Tensor) -> Vec<f32> {
    let mut v = vec![0.0; c.shape(t).unwrap().numel()];
    c.read(t, &mut v).unwrap();
    v
}

/// The configurations every conv test runs: (x, w, options).
fn conv_cases() -> Vec<([usize; 4], [usize; 4], Conv2dOptions)> {
    vec![
        ([2, 3, 5, 5], [4, 3, 3, 3], opts(1, 0, 1, 1)),
        ([1, 2, 7, 6], [3, 2, 3, 2], opts(2, 1, 1, 1)),
        ([2, 2, 7, 7], [2, 2, 3, 3], opts(1, 2, 2, 1)),
        ([1, 4, 5, 4], [6, 2, 3, 3], opts(1, 1, 1, 2)),
        ([1, 3, 9, 7], [2, 3, 1, 1], opts(3, 0, 1, 1)),
        (
            [2, 4, 6, 5],
            [4, 1, 2, 3],
            Conv2dOptions {
                stride: [2, 1],
                padding: [1, 0],
                dilation: [1, 2],
                groups: 4,
            },
        ),
    ]
}

#[test]
fn conv2d_matches_a_float64_direct_convolution() {
    let mut rng = Lcg(7);
    for (xs, ws, o) in conv_cases() {
        let mut c = Context::new();
        let (xv, wv) = (
            random(&mut rng, xs.iter().product()),
            random(&mut rng, ws.iter().product()),
        );
        let bv = random(&mut rng, ws[0]);
        let x = c.tensor(&xs, &xv).unwrap();
        let w = c.tensor(&ws, &wv).unwrap();
        let b = c.tensor(&[ws[0]], &bv).unwrap();
        let y = c.conv2d(x, w, Some(b), o).unwrap();
        let (exact, os) = conv_reference(&xv, xs, &wv, ws, Some(&bv), o);
        assert_eq!(c.shape(y).unwrap().dims(), &os);
        // Each output sums at most C kH kW = 27 products of terms below 1
        // in f32: its rounding error stays far below 1e-5.
        let got = read(&mut c, y);
        let (_, max) = crate::ops::gradcheck::abs_errors(&got, &exact);
        assert!(max < 1e-5, "{xs:?} {ws:?} {o:?}: max error {max}");
    }
}

#[test]
fn conv2d_gradients_match_finite_differences() {
    for (xs, ws, o) in conv_cases() {
        let name = format!("conv2d {xs:?} {ws:?} {o:?}");
        gradcheck(Check::new(&name, &[&xs, &ws, &[ws[0]]]), |c, t| {
            c.conv2d(t[0], t[1], Some(t[2]), o)
        });
    }
    gradcheck(
        Check::new("conv2d without bias", &[&[1, 2, 4, 4], &[2, 2, 2, 2]]),
        |c, t| c.conv2d(t[0], t[1], None, opts(1, 1, 1, 1)),
    );
}

/// Values and gradients of `f` over x, w and bias of the given data,
/// weighted by `wt` so every output's gradient differs.
fn values_and_grads(
    xs: [usize; 4],
    ws: [usize; 4],
    data: [&[f32]; 4],
    f: impl Fn(&mut Context, Tensor, Tensor, Tensor) -> crate::Result<Tensor>,
) -> Vec<Vec<f32>> {
    let mut c = Context::new();
    let x = c.param(&xs, Some(data[0])).unwrap();
    let w = c.param(&ws, Some(data[1])).unwrap();
    let b = c.param(&[ws[0]], Some(data[2])).unwrap();
    let y = f(&mut c, x, w, b).unwrap();
    let wt = c.tensor(c.shape(y).unwrap().dims(), data[3]).unwrap();
    let p = c.mul(y, wt).unwrap();
    let s = c.sum(p).unwrap();
    c.backward(s).unwrap();
    let mut out = vec![read(&mut c, y)];
    for t in [x, w, b] {
        let mut g = vec![0.0; c.shape(t).unwrap().numel()];
        c.read_grad(t, &mut g).unwrap();
        out.push(g);
    }
    out
}

#[test]
fn conv2d_relu_is_relu_of_conv2d_bit_for_bit() {
    let mut rng = Lcg(13);
    // The cases, and one cut into image tasks (products worth two threads).
    let mut cases = conv_cases();
    cases.push(([10, 16, 10, 10], [16, 16, 3, 3], opts(1, 1, 1, 1)));
    for (xs, ws, o) in cases {
        let (xv, wv, bv) = (
            random(&mut rng, xs.iter().product()),
            random(&mut rng, ws.iter().product()),
            random(&mut rng, ws[0]),
        );
        let (exact, os) = conv_reference(&xv, xs, &wv, ws, Some(&bv), o);
        let wt = random(&mut rng, os.iter().product());
        let data = [&xv[..], &wv, &bv, &wt];
        let fused = values_and_grads(xs, ws, data, |c, x, w, b| c.conv2d_relu(x, w, Some(b), o));
        let apart = values_and_grads(xs, ws, data, |c, x, w, b| {
            let y = c.conv2d(x, w, Some(b), o)?;
            c.relu(y)
        });
        let bits = |v: &Vec<Vec<f32>>| -> Vec<Vec<u32>> {
            v.iter()
                .map(|t| t.iter().map(|f| f.to_bits()).collect())
                .collect()
        };
        assert_eq!(bits(&fused), bits(&apart), "{xs:?} {ws:?} {o:?}");
        // Both clamp at 0, so both are the clamped float64 reference.
        let clamped: Vec<f64> = exact.iter().map(|v| v.max(0.0)).collect();
        let (_, max) = crate::ops::gradcheck::abs_errors(&fused[0], &clamped);
        assert!(max < 1e-5, "{xs:?} {ws:?} {o:?}: max error {max}");
        assert!(fused[0].contains(&0.0) && fused[0].iter().any(|&v| v > 0.0));
    }
}

#[test]
fn conv2d_relu_gradients_match_finite_differences() {
    // x is scaled by 0.1, so each product sum stays within 2.7 of the
    // bias, and the bias is set 3 above or below 0 by channel: every
    // output sits far from the kink, the channels below it masked whole.
    for (xs, ws, o) in conv_cases() {
        let name = format!("conv2d_relu {xs:?} {ws:?} {o:?}");
        let offsets: Vec<f32> = (0..ws[0]).map(|i| [3.0, -3.0][i % 2]).collect();
        gradcheck(Check::new(&name, &[&xs, &ws, &[ws[0]]]), |c, t| {
            let x = c.scale(t[0], 0.1)?;
            let small = c.scale(t[2], 0.1)?;
            let offsets = c.tensor(&[ws[0]], &offsets)?;
            let b = c.add(small, offsets)?;
            c.conv2d_relu(x, t[1], Some(b), o)
        });
    }
}

#[test]
fn conv1d_is_conv2d_with_unit_height() {
    let mut rng = Lcg(11);
    let (xv, wv, bv) = (
        random(&mut rng, 2 * 4 * 9),
        random(&mut rng, 6 * 2 * 3),
        random(&mut rng, 6),
    );
    let mut c = Context::new();
    let x = c.tensor(&[2, 4, 9], &xv).unwrap();
    let w = c.tensor(&[6, 2, 3], &wv).unwrap();
    let b = c.tensor(&[6], &bv).unwrap();
    let y = c.conv1d(x, w, Some(b), 2, 1, 2, 2).unwrap();
    let o = Conv2dOptions {
        stride: [1, 2],
        padding: [0, 1],
        dilation: [1, 2],
        groups: 2,
    };
    let (exact, [n, co, _, lo]) =
        conv_reference(&xv, [2, 4, 1, 9], &wv, [6, 2, 1, 3], Some(&bv), o);
    assert_eq!(c.shape(y).unwrap().dims(), &[n, co, lo]);
    let (_, max) = crate::ops::gradcheck::abs_errors(&read(&mut c, y), &exact);
    assert!(max < 1e-5, "max error {max}");
    gradcheck(
        Check::new("conv1d", &[&[2, 4, 9], &[6, 2, 3], &[6]]),
        |c, t| c.conv1d(t[0], t[1], Some(t[2]), 2, 1, 2, 2),
    );
}

#[test]
fn conv_bad_arguments_are_errors_naming_the_op() {
    let mut c = Context::new();
    let x = c.tensor(&[1, 4, 5, 5], &[0.0; 100]).unwrap();
    let w = c.tensor(&[2, 4, 3, 3], &[0.0; 72]).unwrap();
    let w3 = c.tensor(&[2, 3, 3, 3], &[0.0; 54]).unwrap();
    let big = c.tensor(&[2, 4, 7, 7], &[0.0; 392]).unwrap();
    let b3 = c.tensor(&[3], &[0.0; 3]).unwrap();
    let shape_err = |r: crate::Result<Tensor>| match r {
        Err(Error::ShapeMismatch { op, .. }) => assert_eq!(op, "conv2d"),
        other => panic!("expected a shape mismatch, got {other:?}"),
    };
    let arg_err = |r: crate::Result<Tensor>| match r {
        Err(Error::InvalidArgument { op, .. }) => assert_eq!(op, "conv2d"),
        other => panic!("expected an invalid argument, got {other:?}"),
    };
    shape_err(c.conv2d(x, w3, None, opts(1, 0, 1, 1)));
    shape_err(c.conv2d(x, w, None, opts(1, 0, 1, 3)));
    shape_err(c.conv2d(x, big, None, opts(1, 0, 1, 1)));
    shape_err(c.conv2d(x, w, None, opts(1, 0, 3, 1)));
    shape_err(c.conv2d(x, w, Some(b3), opts(1, 0, 1, 1)));
    shape_err(
        c.conv2d(w3, x, None, opts(1, 0, 1, 1))
            .and(c.conv1d(x, w, None, 1, 0, 1, 1)),
    );
    arg_err(c.conv2d(x, w, None, opts(0, 0, 1, 1)));
    arg_err(c.conv2d(x, w, None, opts(1, 0, 0, 1)));
    arg_err(c.conv2d(x, w, None, opts(1, 0, 1, 0)));
    arg_err(c.conv2d(x, w, None, opts(1, 1 << 16, 1, 1)));
    let msg = c
        .conv2d(x, w3, None, opts(1, 0, 1, 1))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("conv2d") && msg.contains("[1,4,5,5]") && msg.contains("[2,3,3,3]"),
        "{msg}"
    );
}

/// Reference pooling in f64, PyTorch's rules: (values, argmax flat index).
fn pool_reference(
    x: &[f32],
    [n, c, h, w]: [usize; 4],
    o: Pool2dOptions,
    max: bool,
    count_include_pad: bool,
) -> (Vec<f64>, Vec<usize>, [usize; 2]) {
    let size = |len: usize, a: usize| {
        let (k, s, p) = (o.kernel[a], o.stride[a], o.padding[a]);
        let room = len + 2 * p - k;
        let mut out = if o.ceil_mode {
            room.div_ceil(s)
        } else {
            room / s
        } + 1;
        if o.ceil_mode && (out - 1) * s >= len + p {
            out -= 1;
        }
        out
    };
    let (ho, wo) = (size(h, 0), size(w, 1));
    let (mut y, mut arg) = (Vec::new(), Vec::new());
    for plane in 0..n * c {
        for oh in 0..ho {
            for ow in 0..wo {
                let hs = (oh * o.stride[0]) as i64 - o.padding[0] as i64;
                let ws = (ow * o.stride[1]) as i64 - o.padding[1] as i64;
                let (he, we) = (hs + o.kernel[0] as i64, ws + o.kernel[1] as i64);
                let pad_count = (he.min((h + o.padding[0]) as i64) - hs)
                    * (we.min((w + o.padding[1]) as i64) - ws);
                let (mut best, mut at, mut sum, mut count) = (f64::NEG_INFINITY, 0, 0.0, 0);
                for ih in hs.max(0)..he.min(h as i64) {
                    for iw in ws.max(0)..we.min(w as i64) {
                        let i = (plane * h + ih as usize) * w + iw as usize;
                        let v = x[i] as f64;
                        if v > best {
                            (best, at) = (v, i);
                        }
                        sum += v;
                        count += 1;
                    }
                }
                if max {
                    y.push(best);
                    arg.push(at);
                } else {
                    y.push(
                        sum / if count_include_pad {
                            pad_count as f64
                        } else {
                            count as f64
                        },
                    );
                }
            }
        }
    }
    (y, arg, [ho, wo])
}

fn pool_cases() -> Vec<([usize; 4], Pool2dOptions)> {
    vec![
        ([2, 2, 6, 6], pool_opts(2, 2, 0, false)),
        // 2x2 windows leaving a last row and column uncovered.
        ([2, 3, 7, 5], pool_opts(2, 2, 0, false)),
        ([1, 3, 7, 5], pool_opts(3, 2, 1, false)),
        ([1, 2, 7, 7], pool_opts(3, 2, 1, true)),
        ([2, 1, 5, 8], pool_opts(2, 3, 1, true)),
        ([1, 2, 6, 5], pool_opts(3, 1, 0, false)),
        (
            [1, 2, 9, 6],
            Pool2dOptions {
                kernel: [3, 2],
                stride: [2, 1],
                padding: [1, 1],
                ceil_mode: true,
            },
        ),
    ]
}

#[test]
fn pools_match_float64_references() {
    let mut rng = Lcg(5);
    for (xs, o) in pool_cases() {
        let xv = random(&mut rng, xs.iter().product());
        let mut c = Context::new();
        let x = c.tensor(&xs, &xv).unwrap();
        let mx = c.max_pool2d(x, o).unwrap();
        let (exact, _, [ho, wo]) = pool_reference(&xv, xs, o, true, false);
        assert_eq!(
            c.shape(mx).unwrap().dims(),
            &[xs[0], xs[1], ho, wo],
            "{xs:?} {o:?}"
        );
        // A maximum is one of the inputs: exact.
        let (_, max) = crate::ops::gradcheck::abs_errors(&read(&mut c, mx), &exact);
        assert_eq!(max, 0.0, "{xs:?} {o:?}");
        for include in [false, true] {
            let av = c.avg_pool2d(x, o, include).unwrap();
            let (exact, _, _) = pool_reference(&xv, xs, o, false, include);
            // At most 9 f32 additions and a division: a few ulps of 1.
            let (_, max) = crate::ops::gradcheck::abs_errors(&read(&mut c, av), &exact);
            assert!(max < 1e-6, "{xs:?} {o:?} {include}: {max}");
        }
    }
    let xv = random(&mut rng, 2 * 3 * 4 * 5);
    let mut c = Context::new();
    let x = c.tensor(&[2, 3, 4, 5], &xv).unwrap();
    let g = c.global_avg_pool2d(x).unwrap();
    assert_eq!(c.shape(g).unwrap().dims(), &[2, 3]);
    let exact: Vec<f64> = xv
        .chunks(20)
        .map(|p| p.iter().map(|&v| v as f64).sum::<f64>() / 20.0)
        .collect();
    let (_, max) = crate::ops::gradcheck::abs_errors(&read(&mut c, g), &exact);
    // Summed in f64: only the final rounding to f32.
    assert!(max < 1e-7, "{max}");
}

#[test]
fn ceil_mode_drops_a_window_starting_in_the_right_padding() {
    // H = 4, k = 2, s = 2, p = 1: ceil gives 3 windows starting at -1, 1,
    // 3; a fourth would start at 5 >= H + p and is dropped (PyTorch).
    let mut c = Context::new();
    let x = c.tensor(&[1, 1, 4, 4], &[0.0; 16]).unwrap();
    let y = c.max_pool2d(x, pool_opts(2, 2, 1, true)).unwrap();
    assert_eq!(c.shape(y).unwrap().dims(), &[1, 1, 3, 3]);
    let x = c.tensor(&[1, 1, 5, 5], &[0.0; 25]).unwrap();
    let y = c.avg_pool2d(x, pool_opts(2, 2, 1, true), true).unwrap();
    assert_eq!(c.shape(y).unwrap().dims(), &[1, 1, 3, 3]);
    let y = c.avg_pool2d(x, pool_opts(2, 2, 0, true), true).unwrap();
    assert_eq!(c.shape(y).unwrap().dims(), &[1, 1, 3, 3]);
    // The last window covers one input column and no padding: divisor 2
    // with count_include_pad (its part past the padding is not counted).
    let ones = c.tensor(&[1, 1, 2, 3], &[1.0; 6]).unwrap();
    let y = c.avg_pool2d(ones, pool_opts(2, 2, 0, true), true).unwrap();
    assert_eq!(read(&mut c, y), vec![1.0, 1.0]);
}

#[test]
fn max_pool_gives_a_tied_window_gradient_to_its_first_maximum() {
    let mut c = Context::new();
    let x = c
        .param(&[1, 1, 2, 4], Some(&[1., 3., 3., 0., 3., 3., 2., 2.]))
        .unwrap();
    let y = c.max_pool2d(x, pool_opts(2, 2, 0, false)).unwrap();
    let s = c.sum(y).unwrap();
    c.backward(s).unwrap();
    let mut g = [0.0f32; 8];
    c.read_grad(x, &mut g).unwrap();
    assert_eq!(g, [0., 1., 1., 0., 0., 0., 0., 0.]);
}

#[test]
fn max_pool_gradient_adds_to_one_already_there() {
    // x feeds the pooling and a sum: its gradient is 1 everywhere plus
    // the pooling's, which the second op's kernel adds (the slot is not
    // newborn then) whichever runs first.
    let xv = [
        1., 3., 3., 0., 5., 3., 2., 2., 4., 7., 1., 1., 0., 0., 9., 8.,
    ];
    let mut c = Context::new();
    let x = c.param(&[1, 1, 4, 4], Some(&xv)).unwrap();
    let y = c.max_pool2d(x, pool_opts(2, 2, 0, false)).unwrap();
    let sy = c.sum(y).unwrap();
    let sx = c.sum(x).unwrap();
    let s = c.add(sy, sx).unwrap();
    c.backward(s).unwrap();
    let mut g = [0.0f32; 16];
    c.read_grad(x, &mut g).unwrap();
    let want = [
        1., 1., 2., 1., 2., 1., 1., 1., 1., 2., 1., 1., 1., 1., 2., 1.,
    ];
    assert_eq!(g, want);
}

/// Maximum pooling of spread values: x is mapped to 0.1 x + d with
/// distinct offsets d 0.5 apart, so no window holds two values closer
/// than 0.3, far beyond the check's steps.
fn spread(c: &mut Context, x: Tensor) -> crate::Result<Tensor> {
    let shape = c.shape(x)?;
    let n = shape.numel();
    let offsets: Vec<f32> = (0..n).map(|i| ((i * 7919) % n) as f32 * 0.5).collect();
    let d = c.tensor(shape.dims(), &offsets)?;
    let small = c.scale(x, 0.1)?;
    c.add(small, d)
}

#[test]
fn pool_gradients_match_finite_differences() {
    for (xs, o) in pool_cases() {
        let name = format!("max_pool2d {xs:?} {o:?}");
        gradcheck(Check::new(&name, &[&xs]), |c, t| {
            let x = spread(c, t[0])?;
            c.max_pool2d(x, o)
        });
        for include in [false, true] {
            let name = format!("avg_pool2d {xs:?} {o:?} {include}");
            gradcheck(Check::new(&name, &[&xs]), |c, t| {
                c.avg_pool2d(t[0], o, include)
            });
        }
    }
    gradcheck(Check::new("global_avg_pool2d", &[&[2, 3, 3, 5]]), |c, t| {
        c.global_avg_pool2d(t[0])
    });
}

#[test]
fn pool_bad_arguments_are_errors_naming_the_op() {
    let mut c = Context::new();
    let x = c.tensor(&[1, 1, 4, 4], &[0.0; 16]).unwrap();
    let flat = c.tensor(&[4, 4], &[0.0; 16]).unwrap();
    for (o, what) in [
        (pool_opts(2, 0, 0, false), "zero stride"),
        (pool_opts(0, 1, 0, false), "zero kernel"),
        (pool_opts(2, 2, 2, false), "padding above half the kernel"),
    ] {
        match c.max_pool2d(x, o) {
            Err(Error::InvalidArgument { op, .. }) => assert_eq!(op, "max_pool2d", "{what}"),
            other => panic!("{what}: {other:?}"),
        }
        match c.avg_pool2d(x, o, true) {
            Err(Error::InvalidArgument { op, .. }) => assert_eq!(op, "avg_pool2d", "{what}"),
            other => panic!("{what}: {other:?}"),
        }
    }
    assert!(matches!(
        c.max_pool2d(x, pool_opts(5, 1, 0, false)),
        Err(Error::BadShape {
            op: "max_pool2d",
            ..
        })
    ));
    assert!(matches!(
        c.max_pool2d(flat, pool_opts(2, 2, 0, false)),
        Err(Error::BadShape {
            op: "max_pool2d",
            ..
        })
    ));
    assert!(matches!(
        c.global_avg_pool2d(flat),
        Err(Error::BadShape {
            op: "global_avg_pool2d",
            ..
        })
    ));
}

/// Speed (measured, not asserted): forward and backward of a 32 -> 64,
/// 3x3, padding 1 convolution on [128, 32, 14, 14]. Run with
/// `cargo test --release --lib conv_speed -- --ignored --nocapture`
/// (the thread count from `AG_NUM_THREADS`, as everywhere).
#[test]
#[ignore]
fn conv_speed() {
    let mut rng = Lcg(9);
    let (xs, ws) = ([128, 32, 14, 14], [64, 32, 3, 3]);
    let mut c = Context::new();
    let x = c
        .param(&xs, Some(&random(&mut rng, xs.iter().product())))
        .unwrap();
    let w = c
        .param(&ws, Some(&random(&mut rng, ws.iter().product())))
        .unwrap();
    let b = c.param(&[64], Some(&random(&mut rng, 64))).unwrap();
    let mut times = Vec::new();
    for _ in 0..6 {
        c.reset();
        let t0 = std::time::Instant::now();
        let y = c.conv2d(x, w, Some(b), opts(1, 1, 1, 1)).unwrap();
        let s = c.sum(y).unwrap();
        c.backward(s).unwrap();
        times.push(t0.elapsed().as_secs_f64() * 1e3);
        c.zero_grad();
    }
    times.sort_by(f64::total_cmp);
    println!(
        "conv2d [128,32,14,14] 32->64 3x3 pad 1, forward+backward: median {:.1} ms, best {:.1} ms ({} threads)",
        times[times.len() / 2],
        times[0],
        crate::thread_info().threads
    );
}

/// Timing of the network's first max pooling forward, [128, 32, 28, 28] 2x2
/// stride 2: `cargo test --release --lib max_pool_speed -- --ignored
/// --nocapture`.
#[test]
#[ignore]
fn max_pool_speed() {
    let mut rng = Lcg(5);
    let mut c = Context::new();
    let xs = [128, 32, 28, 28];
    let x = c
        .param(&xs, Some(&random(&mut rng, xs.iter().product())))
        .unwrap();
    let mut times = Vec::new();
    for _ in 0..30 {
        c.reset();
        let t0 = std::time::Instant::now();
        c.max_pool2d(x, pool_opts(2, 2, 0, false)).unwrap();
        times.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    println!(
        "max_pool2d [128,32,28,28] 2x2 forward: median {:.2} ms, best {:.2} ms ({} threads)",
        times[times.len() / 2],
        times[0],
        crate::thread_info().threads
    );
}

#[test]
fn bias_sum_pairs_keep_48_bits_and_overflow_to_infinity() {
    let mut rng = Lcg(29);
    // Three channels of 37 values spread over twelve binades, so the
    // sums need more than f32's 24 bits; then one that overflows f32.
    let l = 37;
    let mut dy: Vec<f32> = random(&mut rng, 3 * l)
        .iter()
        .enumerate()
        .map(|(i, v)| v * 2f32.powi((i % 12) as i32))
        .collect();
    let mut pairs = vec![f32::NAN; 6];
    super::im2col::image_channel_sums(&dy, l, &mut pairs);
    for (row, pair) in dy.chunks_exact(l).zip(pairs.chunks_exact(2)) {
        let exact: f64 = row.iter().map(|&v| v as f64).sum();
        let kept = pair[0] as f64 + pair[1] as f64;
        assert!(
            (kept - exact).abs() <= exact.abs() * 2f64.powi(-47),
            "{kept} vs {exact}"
        );
        assert!(pair[1] != 0.0 || pair[0] as f64 == exact);
    }
    dy[..l].fill(f32::MAX);
    super::im2col::image_channel_sums(&dy, l, &mut pairs);
    assert_eq!((pairs[0], pairs[1]), (f32::INFINITY, 0.0));
    // No pixels: every channel's sum is 0, whatever the room held.
    let mut empty_pairs = vec![f32::NAN; 6];
    super::im2col::image_channel_sums(&[], 0, &mut empty_pairs);
    assert_eq!(empty_pairs, vec![0.0; 6]);
}

#[test]
fn bias_gradient_bits_do_not_depend_on_the_other_gradients_wanted() {
    let mut rng = Lcg(31);
    // One shape cut into image tasks (products worth two threads), one not.
    let shapes = [
        ([10, 16, 10, 10], [16, 16, 3, 3], opts(1, 1, 1, 1)),
        ([2, 3, 5, 5], [4, 3, 3, 3], opts(1, 0, 1, 1)),
    ];
    for (xs, ws, o) in shapes {
        let xv = random(&mut rng, xs.iter().product());
        let wv = random(&mut rng, ws.iter().product());
        let bv = random(&mut rng, ws[0]);
        for relu in [false, true] {
            // (x a parameter, w a parameter): all four, the bias always one.
            let bias_grad = |x_param: bool, w_param: bool| {
                let mut c = Context::new();
                let b = c.param(&[ws[0]], Some(&bv)).unwrap();
                // Parameters before any activation.
                let xp = x_param.then(|| c.param(&xs, Some(&xv)).unwrap());
                let wp = w_param.then(|| c.param(&ws, Some(&wv)).unwrap());
                let x = xp.unwrap_or_else(|| c.tensor(&xs, &xv).unwrap());
                let w = wp.unwrap_or_else(|| c.tensor(&ws, &wv).unwrap());
                let y = if relu {
                    c.conv2d_relu(x, w, Some(b), o)
                } else {
                    c.conv2d(x, w, Some(b), o)
                };
                let s = c.sum(y.unwrap()).unwrap();
                c.backward(s).unwrap();
                let mut g = vec![0.0; ws[0]];
                c.read_grad(b, &mut g).unwrap();
                g.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            };
            let all = bias_grad(true, true);
            for (xp, wp) in [(true, false), (false, true), (false, false)] {
                assert_eq!(bias_grad(xp, wp), all, "{xs:?} relu {relu} x {xp} w {wp}");
            }
        }
    }
}
