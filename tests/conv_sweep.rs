//! Convolution and pooling on shapes nobody picked: a seeded sweep of
//! random configurations (batch, channels, groups, kernel, stride, padding,
//! dilation, ceil mode, and the image sizes a trained network uses), each
//! forward and every gradient compared with a float64 direct computation.
//!
//! Every configuration PyTorch accepts must be accepted: a convolution
//! whose dilated kernel fits the padded input, any padding; a pool whose
//! padding is at most half its kernel.
//!
//! The bound is the a-priori one for a float32 sum of products in any
//! order: |ours - exact| <= (n + 2) u sum|terms|, with n the number of
//! terms and u = 2^-24. It holds for the GEMM's blocked sums, for col2im's
//! adding of partial sums and with FMA, so it cannot fail on a correct
//! kernel, while a wrong tap, a missing term or a doubled one is off by
//! the size of a term.

use arenagrad::{Context, Conv2dOptions, Pool2dOptions, Tensor};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    /// An integer in lo..=hi.
    fn int(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() as usize) % (hi - lo + 1)
    }
    fn values(&mut self, n: usize) -> Vec<f32> {
        (0..n)
            .map(|_| (self.next() as f64 / (1u64 << 31) as f64 * 2.0 - 1.0) as f32)
            .collect()
    }
}

const U: f64 = 1.0 / (1u64 << 24) as f64;

/// Checks `got` against `exact` within (terms + 2) u abs_sum per element.
fn check(what: &str, got: &[f32], exact: &[f64], abs_sum: &[f64], terms: &[usize]) {
    assert_eq!(got.len(), exact.len(), "{what}: length");
    for i in 0..got.len() {
        let bound = (terms[i] + 2) as f64 * U * abs_sum[i] + f64::MIN_POSITIVE;
        let err = (got[i] as f64 - exact[i]).abs();
        assert!(
            err <= bound,
            "{what}: element {i}: got {} exact {} (error {err:e} > bound {bound:e})",
            got[i],
            exact[i]
        );
    }
}

fn read(c: &Context, t: Tensor) -> Vec<f32> {
    let mut v = vec![0.0; c.shape(t).unwrap().numel()];
    c.read(t, &mut v).unwrap();
    v
}

fn read_grad(c: &Context, t: Tensor) -> Vec<f32> {
    let mut v = vec![0.0; c.shape(t).unwrap().numel()];
    c.read_grad(t, &mut v).unwrap();
    v
}

/// PyTorch's output length of a convolution, None where the dilated
/// kernel does not fit the padded input.
fn conv_len(len: usize, k: usize, s: usize, p: usize, d: usize) -> Option<usize> {
    let span = d * (k - 1) + 1;
    (len + 2 * p >= span).then(|| (len + 2 * p - span) / s + 1)
}

/// PyTorch's output length of a pool (no dilation), None where it is < 1.
fn pool_len(len: usize, k: usize, s: usize, p: usize, ceil: bool) -> Option<usize> {
    if len + 2 * p < k {
        return None;
    }
    let room = len + 2 * p - k;
    let mut n = if ceil { room.div_ceil(s) } else { room / s } + 1;
    if ceil && (n - 1) * s >= len + p {
        n -= 1;
    }
    Some(n)
}

/// A float64 sum with the magnitude and term count its f32 bound needs.
#[derive(Clone, Copy, Default)]
struct Acc {
    sum: f64,
    abs: f64,
    terms: usize,
}

impl Acc {
    fn add(&mut self, v: f64) {
        self.sum += v;
        self.abs += v.abs();
        self.terms += 1;
    }
}

fn split(acc: &[Acc]) -> (Vec<f64>, Vec<f64>, Vec<usize>) {
    (
        acc.iter().map(|a| a.sum).collect(),
        acc.iter().map(|a| a.abs).collect(),
        acc.iter().map(|a| a.terms).collect(),
    )
}

struct ConvCase {
    x: [usize; 4],
    w: [usize; 4],
    o: Conv2dOptions,
    bias: bool,
}

/// Runs one convolution through conv2d (or conv1d when height is 1 and the
/// height options are trivial, half of those times), with loss
/// sum(y * g), and checks y, dx, dw and db against float64.
fn run_conv(rng: &mut Rng, case: &ConvCase, via_conv1d: bool) {
    let ConvCase {
        x: xs,
        w: ws,
        o,
        bias,
    } = *case;
    let [n, c, h, wd] = xs;
    let [co, cg, kh, kw] = ws;
    let ho = conv_len(h, kh, o.stride[0], o.padding[0], o.dilation[0]).unwrap();
    let wo = conv_len(wd, kw, o.stride[1], o.padding[1], o.dilation[1]).unwrap();
    let what = format!("conv x {xs:?} w {ws:?} {o:?} bias {bias} conv1d {via_conv1d}");
    let xv = rng.values(xs.iter().product());
    let wv = rng.values(ws.iter().product());
    let bv = rng.values(co);
    let gv = rng.values(n * co * ho * wo);

    let mut ctx = Context::new();
    let (x, w, b, y);
    if via_conv1d {
        x = ctx.param(&[n, c, wd], Some(&xv)).unwrap();
        w = ctx.param(&[co, cg, kw], Some(&wv)).unwrap();
        b = ctx.param(&[co], Some(&bv)).unwrap();
        y = ctx
            .conv1d(
                x,
                w,
                bias.then_some(b),
                o.stride[1],
                o.padding[1],
                o.dilation[1],
                o.groups,
            )
            .unwrap_or_else(|e| panic!("{what}: refused: {e}"));
    } else {
        x = ctx.param(&xs, Some(&xv)).unwrap();
        w = ctx.param(&ws, Some(&wv)).unwrap();
        b = ctx.param(&[co], Some(&bv)).unwrap();
        y = ctx
            .conv2d(x, w, bias.then_some(b), o)
            .unwrap_or_else(|e| panic!("{what}: refused: {e}"));
    }
    let want: Vec<usize> = if via_conv1d {
        vec![n, co, wo]
    } else {
        vec![n, co, ho, wo]
    };
    assert_eq!(ctx.shape(y).unwrap().dims(), &want[..], "{what}: shape");
    let g = ctx.tensor(&want, &gv).unwrap();
    let weighted = ctx.mul(y, g).unwrap();
    let loss = ctx.sum(weighted).unwrap();
    ctx.backward(loss).unwrap();

    let cog = co / o.groups;
    let mut yr = vec![Acc::default(); n * co * ho * wo];
    let mut dx = vec![Acc::default(); xv.len()];
    let mut dw = vec![Acc::default(); wv.len()];
    let mut db = vec![Acc::default(); co];
    for bi in 0..n {
        for oc in 0..co {
            let grp = oc / cog;
            for oh in 0..ho {
                for ow in 0..wo {
                    let oi = ((bi * co + oc) * ho + oh) * wo + ow;
                    let gy = gv[oi] as f64;
                    if bias {
                        yr[oi].add(bv[oc] as f64);
                        db[oc].add(gy);
                    }
                    for ic in 0..cg {
                        let cin = grp * cg + ic;
                        for i in 0..kh {
                            for j in 0..kw {
                                let ih = (oh * o.stride[0] + i * o.dilation[0]) as i64
                                    - o.padding[0] as i64;
                                let iw = (ow * o.stride[1] + j * o.dilation[1]) as i64
                                    - o.padding[1] as i64;
                                if ih < 0 || iw < 0 || ih >= h as i64 || iw >= wd as i64 {
                                    continue;
                                }
                                let xi = ((bi * c + cin) * h + ih as usize) * wd + iw as usize;
                                let wi = ((oc * cg + ic) * kh + i) * kw + j;
                                yr[oi].add(xv[xi] as f64 * wv[wi] as f64);
                                dx[xi].add(gy * wv[wi] as f64);
                                dw[wi].add(gy * xv[xi] as f64);
                            }
                        }
                    }
                }
            }
        }
    }
    let (e, a, t) = split(&yr);
    check(&format!("{what}: y"), &read(&ctx, y), &e, &a, &t);
    let (e, a, t) = split(&dx);
    check(&format!("{what}: dx"), &read_grad(&ctx, x), &e, &a, &t);
    let (e, a, t) = split(&dw);
    check(&format!("{what}: dw"), &read_grad(&ctx, w), &e, &a, &t);
    if bias {
        let (e, a, t) = split(&db);
        check(&format!("{what}: db"), &read_grad(&ctx, b), &e, &a, &t);
    }
}

fn random_conv(rng: &mut Rng) -> ConvCase {
    loop {
        let groups = [1, 1, 1, 2, 3][rng.int(0, 4)];
        let c = groups * rng.int(1, 3);
        let co = groups * rng.int(1, 4);
        let (kh, kw) = (rng.int(1, 4), rng.int(1, 4));
        let o = Conv2dOptions {
            stride: [rng.int(1, 3), rng.int(1, 3)],
            padding: [rng.int(0, kh), rng.int(0, kw)],
            dilation: [rng.int(1, 2), rng.int(1, 2)],
            groups,
        };
        let (h, w) = (rng.int(1, 11), rng.int(1, 11));
        let fits = conv_len(h, kh, o.stride[0], o.padding[0], o.dilation[0]).is_some()
            && conv_len(w, kw, o.stride[1], o.padding[1], o.dilation[1]).is_some();
        if fits {
            return ConvCase {
                x: [rng.int(1, 3), c, h, w],
                w: [co, c / groups, kh, kw],
                o,
                bias: rng.int(0, 3) != 0,
            };
        }
    }
}

#[test]
fn random_convolutions_match_float64() {
    let mut rng = Rng(2024);
    for _ in 0..300 {
        let case = random_conv(&mut rng);
        run_conv(&mut rng, &case, false);
    }
}

#[test]
fn random_conv1d_match_float64() {
    let mut rng = Rng(77);
    for _ in 0..100 {
        let mut case = random_conv(&mut rng);
        case.x[2] = 1;
        case.w[2] = 1;
        case.o.stride[0] = 1;
        case.o.padding[0] = 0;
        case.o.dilation[0] = 1;
        run_conv(&mut rng, &case, true);
    }
}

/// The shapes image networks train with, where the fast paths run: a
/// one-channel first layer, 3x3 "same" convolutions of 8-32 channels at
/// 28x28 and 14x14, a strided and a 1x1 convolution, a batch of 8.
#[test]
fn network_shaped_convolutions_match_float64() {
    let mut rng = Rng(5);
    let same = |groups| Conv2dOptions {
        padding: [1, 1],
        groups,
        ..Default::default()
    };
    let cases = [
        ([8, 1, 28, 28], [16, 1, 3, 3], same(1)),
        ([8, 16, 28, 28], [16, 16, 3, 3], same(1)),
        ([8, 16, 14, 14], [32, 16, 3, 3], same(1)),
        ([8, 32, 7, 7], [32, 8, 3, 3], same(4)),
        (
            [8, 16, 28, 28],
            [32, 16, 3, 3],
            Conv2dOptions {
                stride: [2, 2],
                padding: [1, 1],
                ..Default::default()
            },
        ),
        ([8, 32, 14, 14], [16, 32, 1, 1], Conv2dOptions::default()),
        ([8, 3, 32, 32], [8, 3, 5, 5], Conv2dOptions::default()),
    ];
    for (x, w, o) in cases {
        for bias in [true, false] {
            run_conv(&mut rng, &ConvCase { x, w, o, bias }, false);
        }
    }
}

/// The output and every gradient (loss sum(y * g)) of `f` on the case's
/// data, as bits.
fn conv_bits(
    case: &ConvCase,
    data: [&[f32]; 4],
    f: impl Fn(&mut Context, Tensor, Tensor, Option<Tensor>) -> Tensor,
) -> Vec<Vec<u32>> {
    let mut ctx = Context::new();
    let x = ctx.param(&case.x, Some(data[0])).unwrap();
    let w = ctx.param(&case.w, Some(data[1])).unwrap();
    let b = ctx.param(&[case.w[0]], Some(data[2])).unwrap();
    let y = f(&mut ctx, x, w, case.bias.then_some(b));
    let g = ctx.tensor(ctx.shape(y).unwrap().dims(), data[3]).unwrap();
    let weighted = ctx.mul(y, g).unwrap();
    let loss = ctx.sum(weighted).unwrap();
    ctx.backward(loss).unwrap();
    let mut out = vec![read(&ctx, y), read_grad(&ctx, x), read_grad(&ctx, w)];
    if case.bias {
        out.push(read_grad(&ctx, b));
    }
    let bits = |v: &Vec<f32>| v.iter().map(|f| f.to_bits()).collect();
    out.iter().map(bits).collect()
}

/// The fused conv + ReLU on the random and the network-shaped
/// configurations: its output and gradients are those of conv2d (held to
/// float64 above) then relu, bit for bit, with about half the outputs
/// masked.
#[test]
fn fused_relu_convolutions_are_relu_of_conv2d() {
    let mut rng = Rng(77);
    let mut cases: Vec<ConvCase> = (0..150).map(|_| random_conv(&mut rng)).collect();
    let same = Conv2dOptions {
        padding: [1, 1],
        ..Default::default()
    };
    for (x, w) in [
        ([8, 1, 28, 28], [16, 1, 3, 3]),
        ([8, 16, 28, 28], [16, 16, 3, 3]),
        ([8, 16, 14, 14], [32, 16, 3, 3]),
    ] {
        cases.push(ConvCase {
            x,
            w,
            o: same,
            bias: true,
        });
    }
    for case in cases {
        let [n, _, h, wd] = case.x;
        let [co, _, kh, kw] = case.w;
        let o = case.o;
        let ho = conv_len(h, kh, o.stride[0], o.padding[0], o.dilation[0]).unwrap();
        let wo = conv_len(wd, kw, o.stride[1], o.padding[1], o.dilation[1]).unwrap();
        let xv = rng.values(case.x.iter().product());
        let wv = rng.values(case.w.iter().product());
        let bv = rng.values(co);
        let gv = rng.values(n * co * ho * wo);
        let data = [&xv[..], &wv, &bv, &gv];
        let fused = conv_bits(&case, data, |c, x, w, b| c.conv2d_relu(x, w, b, o).unwrap());
        let apart = conv_bits(&case, data, |c, x, w, b| {
            let y = c.conv2d(x, w, b, o).unwrap();
            c.relu(y).unwrap()
        });
        assert!(
            fused == apart,
            "conv2d_relu x {:?} w {:?} {o:?} bias {}: not relu(conv2d) bit for bit",
            case.x,
            case.w,
            case.bias
        );
    }
}

/// One pool through max_pool2d or avg_pool2d (loss sum(y * g)), checked
/// with its gradient against float64: the maximum is exact and its
/// gradient goes to the window's first maximum; an average is a sum of
/// at most k*k terms and one division.
fn run_pool(rng: &mut Rng, xs: [usize; 4], o: Pool2dOptions, avg: Option<bool>) {
    let [n, c, h, wd] = xs;
    let [kh, kw] = o.kernel;
    let ho = pool_len(h, kh, o.stride[0], o.padding[0], o.ceil_mode).unwrap();
    let wo = pool_len(wd, kw, o.stride[1], o.padding[1], o.ceil_mode).unwrap();
    let what = format!("pool x {xs:?} {o:?} avg(count_include_pad) {avg:?}");
    let xv = rng.values(xs.iter().product());
    let gv = rng.values(n * c * ho * wo);
    let mut ctx = Context::new();
    let x = ctx.param(&xs, Some(&xv)).unwrap();
    let y = match avg {
        None => ctx.max_pool2d(x, o),
        Some(include) => ctx.avg_pool2d(x, o, include),
    }
    .unwrap_or_else(|e| panic!("{what}: refused: {e}"));
    assert_eq!(ctx.shape(y).unwrap().dims(), &[n, c, ho, wo], "{what}");
    let g = ctx.tensor(&[n, c, ho, wo], &gv).unwrap();
    let weighted = ctx.mul(y, g).unwrap();
    let loss = ctx.sum(weighted).unwrap();
    ctx.backward(loss).unwrap();

    let mut yr = vec![Acc::default(); gv.len()];
    let mut dx = vec![Acc::default(); xv.len()];
    for p in 0..n * c {
        for oh in 0..ho {
            for ow in 0..wo {
                let oi = (p * ho + oh) * wo + ow;
                let (h0, w0) = (
                    (oh * o.stride[0]) as i64 - o.padding[0] as i64,
                    (ow * o.stride[1]) as i64 - o.padding[1] as i64,
                );
                // The window clipped to the padded input (PyTorch's divisor
                // with count_include_pad), then to the input itself.
                let h1 = (h0 + kh as i64).min((h + o.padding[0]) as i64);
                let w1 = (w0 + kw as i64).min((wd + o.padding[1]) as i64);
                let padded_taps = ((h1 - h0) * (w1 - w0)) as f64;
                let inside: Vec<usize> = (h0.max(0)..h1.min(h as i64))
                    .flat_map(|ih| {
                        (w0.max(0)..w1.min(wd as i64))
                            .map(move |iw| (p * h + ih as usize) * wd + iw as usize)
                    })
                    .collect();
                match avg {
                    None => {
                        let first = *inside
                            .iter()
                            .reduce(|a, b| if xv[*b] > xv[*a] { b } else { a })
                            .unwrap();
                        yr[oi].add(xv[first] as f64);
                        dx[first].add(gv[oi] as f64);
                    }
                    Some(include) => {
                        let div = if include {
                            padded_taps
                        } else {
                            inside.len() as f64
                        };
                        for &xi in &inside {
                            yr[oi].add(xv[xi] as f64 / div);
                            dx[xi].add(gv[oi] as f64 / div);
                        }
                    }
                }
            }
        }
    }
    let (e, a, t) = split(&yr);
    check(&format!("{what}: y"), &read(&ctx, y), &e, &a, &t);
    let (e, a, t) = split(&dx);
    check(&format!("{what}: dx"), &read_grad(&ctx, x), &e, &a, &t);
}

#[test]
fn random_pools_match_float64() {
    let mut rng = Rng(99);
    let mut done = 0;
    while done < 300 {
        let kernel = [rng.int(1, 4), rng.int(1, 4)];
        let o = Pool2dOptions {
            kernel,
            stride: [rng.int(1, kernel[0] + 1), rng.int(1, kernel[1] + 1)],
            padding: [rng.int(0, kernel[0] / 2), rng.int(0, kernel[1] / 2)],
            ceil_mode: rng.int(0, 1) == 1,
        };
        let xs = [rng.int(1, 2), rng.int(1, 3), rng.int(1, 10), rng.int(1, 10)];
        let fits = pool_len(xs[2], kernel[0], o.stride[0], o.padding[0], o.ceil_mode).is_some()
            && pool_len(xs[3], kernel[1], o.stride[1], o.padding[1], o.ceil_mode).is_some();
        if !fits {
            continue;
        }
        let kind = [None, Some(true), Some(false)][rng.int(0, 2)];
        run_pool(&mut rng, xs, o, kind);
        done += 1;
    }
    // The pools of an image network, large enough to be cut into tasks.
    let two = Pool2dOptions {
        kernel: [2, 2],
        stride: [2, 2],
        padding: [0, 0],
        ceil_mode: false,
    };
    for kind in [None, Some(true)] {
        run_pool(&mut rng, [8, 16, 28, 28], two, kind);
        run_pool(
            &mut rng,
            [8, 32, 7, 7],
            Pool2dOptions {
                ceil_mode: true,
                ..two
            },
            kind,
        );
    }
}
