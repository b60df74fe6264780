//! Branch-free exp and tanh that the compiler vectorises (libm's expf and
//! tanhf are scalar calls and dominated GELU, softmax and cross-entropy).
//!
//! exp: x = n ln2 + r with |r| <= ln2/2, e^r by a degree-6 Taylor polynomial
//! (truncation error < 1.3e-7 relative), 2^n built in the exponent bits.
//! NaN propagates; inputs are clamped to `[-87.3, 88.3]` (results stay normal).
//!
//! exp_f64 and ln_f64: the same reductions in f64 with series long enough
//! that their truncation is below f64 rounding (a few f64 ulps in all), for
//! kernels that accumulate in f64 and round to f32 once (logsumexp): their
//! f32 results are the libm ones except where the f64 value lies within
//! about 1e-15 of a rounding boundary, where they may differ by one ulp.

use crate::pool::{self, Pool};

// The eight-lane reductions, in their own room, under their old path.
pub(crate) use super::lanes::{
    dot, dot2, max, max_neg, sum, sum_sq_dev, sum_sq_diff_f64, sum_squares_f64,
};

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_145_75;
const LN2_LO: f32 = 1.428_606_8e-6;
/// 1.5 * 2^23: adding and subtracting it rounds to the nearest integer.
const ROUND: f32 = 12_582_912.0;

/// e^x with relative error about 2e-7 over the clamped range.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.3, 88.3);
    let t = x * LOG2E + ROUND;
    let n = t - ROUND;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0))))));
    // The integer n sits in t's low mantissa bits (t is in [2^23, 2^24)):
    // an integer subtraction vectorises, unlike `n as i32`, whose
    // saturating semantics compile to scalar code.
    let ni = (t.to_bits() as i32).wrapping_sub(ROUND.to_bits() as i32);
    let scale = f32::from_bits(((ni + 127) as u32) << 23);
    p * scale
}

const LOG2E_F64: f64 = std::f64::consts::LOG2_E;
/// ln 2 split so that n * LN2_HI_F64 is exact for |n| < 2^20.
const LN2_HI_F64: f64 = 6.931_471_803_691_238e-1;
const LN2_LO_F64: f64 = 1.908_214_929_270_587_7e-10;
/// 1.5 * 2^52: adding and subtracting it rounds to the nearest integer.
const ROUND_F64: f64 = 6_755_399_441_055_744.0;

/// e^x in f64 with relative error a few f64 ulps; inputs clamped to
/// `[-708, 709]` (results stay normal: e^-708 is below anything an f32
/// result keeps), NaN propagates. Its Taylor series runs to degree 13
/// (truncation below 1e-17 relative).
#[inline(always)]
pub(crate) fn exp_f64(x: f64) -> f64 {
    exp_f64_series::<13>(x.clamp(-708.0, 709.0))
}

/// e^x in f64 for x in `[-708, 709]`: x = n ln2 + r with |r| <= ln2/2,
/// e^r by its Taylor series to degree `D` (at most 13; truncation about
/// (ln2/2)^(D+1) / (D+1)! relative), Horner from the highest power, then
/// 2^n put in the exponent bits. Branch-free, so a loop of it vectorises.
#[inline(always)]
pub(crate) fn exp_f64_series<const D: usize>(x: f64) -> f64 {
    let t = x * LOG2E_F64 + ROUND_F64;
    let n = t - ROUND_F64;
    let r = x - n * LN2_HI_F64 - n * LN2_LO_F64;
    let mut p = INV_FACTORIAL[D];
    for &c in INV_FACTORIAL[..D].iter().rev() {
        p = p * r + c;
    }
    // As in `exp`: n sits in t's low mantissa bits, an integer subtraction.
    let ni = (t.to_bits() as i64).wrapping_sub(ROUND_F64.to_bits() as i64);
    let scale = f64::from_bits(((ni + 1023) as u64) << 52);
    p * scale
}

/// 1/k! for k <= 13 (the exp_f64 series).
const INV_FACTORIAL: [f64; 14] = [
    1.0,
    1.0,
    1.0 / 2.0,
    1.0 / 6.0,
    1.0 / 24.0,
    1.0 / 120.0,
    1.0 / 720.0,
    1.0 / 5_040.0,
    1.0 / 40_320.0,
    1.0 / 362_880.0,
    1.0 / 3_628_800.0,
    1.0 / 39_916_800.0,
    1.0 / 479_001_600.0,
    1.0 / 6_227_020_800.0,
];

/// The bits of sqrt(1/2): ln_f64 splits its argument at this mantissa.
const SQRT_HALF_BITS: i64 = 0x3fe6_a09e_667f_3bcd;

/// ln x in f64 for a positive normal finite x, with error a few f64 ulps
/// (the caller keeps other inputs out). x = 2^k f with f in
/// `[sqrt(1/2), sqrt(2))`, ln f = 2 atanh(u), u = (f - 1) / (f + 1),
/// |u| <= 0.172, by its series to u^25 (truncation below 1e-18).
#[inline(always)]
pub(crate) fn ln_f64(x: f64) -> f64 {
    let bits = x.to_bits() as i64;
    let k = bits.wrapping_sub(SQRT_HALF_BITS) >> 52;
    let f = f64::from_bits(bits.wrapping_sub(k << 52) as u64);
    let u = (f - 1.0) / (f + 1.0);
    let u2 = u * u;
    // 1 + u2/3 + u2^2/5 + ... + u2^12/25, by Horner.
    let mut p = 1.0 / 25.0;
    for j in (0..12).rev() {
        p = p * u2 + 1.0 / (2 * j + 1) as f64;
    }
    let k = k as f64;
    k * LN2_HI_F64 + (k * LN2_LO_F64 + 2.0 * u * p)
}

/// tanh(x) = 1 - 2 / (e^{2x} + 1); absolute error about 2e-7 (relative
/// error grows near 0, so the public tanh op uses `special::tanh`; GELU uses this).
#[inline(always)]
pub(crate) fn tanh(x: f32) -> f32 {
    1.0 - 2.0 / (exp(2.0 * x) + 1.0)
}

/// Columns per block of f64 accumulators in [`accumulate_cols_f64`]:
/// 2 KiB, which stay in L1 beside the row being added. Wide blocks read
/// each row as one long contiguous run; 32 columns (the accumulators in
/// registers) read 128 bytes per row at a stride of a whole row, which
/// the prefetchers follow badly. Measured, column sums of [2048, 768]
/// (best of 15): 0.36 ms with 256 columns vs 0.71 with 32 on AVX-512,
/// 0.34 vs 0.80 on AVX2, 0.54 vs 0.95 on the baseline; 512 columns is no
/// better. The width does not change any result: each column is summed
/// over the rows in order whatever the block.
const ROW_BLOCK: usize = 256;

/// out[j] += sum over rows r of the terms `add_row(r, cols, acc)` adds into
/// `acc` (acc[i] is column cols.start + i), accumulated in f64 and rounded
/// to f32 once per column. Summing thousands of rows one by one in f32
/// loses about log2(rows) bits as the partial sums grow; in f64 the result
/// is within half an f32 ulp of exact. Columns go in blocks of
/// [`ROW_BLOCK`] so the accumulators live on the stack (no allocation) and
/// each row's block is a contiguous add the compiler vectorises.
///
/// `out` holds the columns `first..first + out.len()` only, so two threads
/// can own disjoint column ranges (see [`split_columns`]).
#[inline(always)]
pub(crate) fn accumulate_cols_f64(
    out: &mut [f32],
    first: usize,
    rows: usize,
    mut add_row: impl FnMut(usize, std::ops::Range<usize>, &mut [f64]),
) {
    let mut acc = [0.0f64; ROW_BLOCK];
    for (b, ob) in out.chunks_mut(ROW_BLOCK).enumerate() {
        let acc = &mut acc[..ob.len()];
        acc.fill(0.0);
        let start = first + b * ROW_BLOCK;
        let cols = start..start + ob.len();
        for r in 0..rows {
            add_row(r, cols.clone(), acc);
        }
        for (o, &a) in ob.iter_mut().zip(acc.iter()) {
            *o = (*o as f64 + a) as f32;
        }
    }
}

/// out[j] += sum_r x[r, j] with f64 accumulators (see
/// [`accumulate_cols_f64`]). x: [R, N], out: [N]. The columns go in tasks
/// fixed by the shape (see [`split_columns`]), across the pool when one is
/// given; each column's sum is the same bits either way.
pub(crate) fn sum_rows_into_on(pool: Option<&Pool>, out: &mut [f32], x: &[f32]) {
    let n = out.len();
    if n == 0 {
        return;
    }
    let rows = x.len() / n;
    split_columns(pool, out, rows, |part, first| {
        crate::simd::dispatch!(accumulate_cols_f64(part, first, rows, |r, cols, acc| {
            let row = &x[r * n..][cols];
            for (a, &v) in acc.iter_mut().zip(row) {
                *a += v as f64;
            }
        }))
    });
}

/// Runs `f(part, first)` over `out` cut into column tasks (`part` holds
/// the columns `first..first + part.len()`), for kernels whose output
/// columns are independent and each sum `rows` rows. The cut depends on
/// the shape alone; the tasks run across the pool when one is given.
pub(crate) fn split_columns(
    pool: Option<&Pool>,
    out: &mut [f32],
    rows: usize,
    f: impl Fn(&mut [f32], usize) + Sync,
) {
    // Tasks own whole groups of 8 columns, which keeps each task's rows
    // aligned to whole vectors.
    const GROUP: usize = 8;
    let n = pool::task_count(
        out.len() / GROUP,
        MIN_TASK_WORK.div_ceil(rows.max(1) * GROUP * ELEMENT_COST),
    );
    if n == 1 {
        return f(out, 0);
    }
    let width = out.len().div_ceil(n).next_multiple_of(GROUP);
    run_parts(pool, out.chunks_mut(width), &|i, part| f(part, i * width));
}

// ---- task lists of the row and element kernels -----------------------------

/// The weight of one element of a row or element kernel in the work the
/// size thresholds compare (a GELU, a LayerNorm or an exp is some 16 plain
/// operations per element).
pub(crate) const ELEMENT_COST: usize = 16;

/// The least weighted work one task of a row or element kernel gets: half
/// the threshold above which a kernel is worth two threads, so a kernel
/// just above it is cut in two and larger ones into more tasks (up to
/// [`pool::MAX_TASKS`]).
pub(crate) const MIN_TASK_WORK: usize = 1 << 20;

/// How many tasks to cut `units` (rows or elements) of `unit_work` each
/// into: one when `worth` (the caller's shape-only threshold) is false.
/// Never depends on the thread count.
pub(crate) fn task_split(worth: bool, units: usize, unit_work: usize) -> usize {
    if !worth {
        return 1;
    }
    pool::task_count(units, MIN_TASK_WORK.div_ceil(unit_work.max(1)))
}

/// The length of each of `n` element tasks over `len` elements (the last
/// may be shorter): whole 64-byte lines, so no two tasks write one line.
pub(crate) fn part_len(len: usize, n: usize) -> usize {
    len.div_ceil(n.max(1)).next_multiple_of(16).max(1)
}

/// `data` (rows of `width` elements) cut into the `n` row ranges of
/// [`pool::task_range`], in order.
pub(crate) fn row_parts<T>(
    mut data: &mut [T],
    width: usize,
    n: usize,
) -> impl Iterator<Item = &mut [T]> {
    let rows = data.len() / width.max(1);
    (0..n).map(move |i| {
        let len = pool::task_range(rows, n, i).len() * width;
        let (part, rest) = std::mem::take(&mut data).split_at_mut(len);
        data = rest;
        part
    })
}

/// The most parts one [`run_parts`] call takes: two outputs' tasks.
const MAX_PARTS: usize = 2 * pool::MAX_TASKS;

/// Runs `task(i, part)` once for the `i`-th part `parts` yields (at most
/// [`MAX_PARTS`]), across the pool when one is given, else in order on
/// this thread: the same task list either way. The parts (disjoint
/// mutable slices, or tuples of them) are held in an array on the stack:
/// no allocation.
pub(crate) fn run_parts<P: Send>(
    pool: Option<&Pool>,
    parts: impl IntoIterator<Item = P>,
    task: &(dyn Fn(usize, P) + Sync),
) {
    let mut slots: [Option<P>; MAX_PARTS] = std::array::from_fn(|_| None);
    let mut n = 0;
    for part in parts {
        assert!(n < MAX_PARTS, "more than {MAX_PARTS} parts");
        slots[n] = Some(part);
        n += 1;
    }
    let run = |i: usize, slot: &mut Option<P>| {
        if let Some(part) = slot.take() {
            task(i, part)
        }
    };
    match pool {
        Some(pool) if n > 1 => pool.run_slots(&mut slots[..n], &run),
        _ => {
            for (i, slot) in slots[..n].iter_mut().enumerate() {
                run(i, slot)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::simd::{self, Level};

    #[test]
    fn row_sums_equal_f64_sums_rounded_once_at_every_width() {
        // Widths around the column block: partial blocks and exact ones.
        let mut rng = crate::ops::gradcheck::Lcg(5);
        // Under Miri there is no worker: only the one-thread path runs.
        let pool = if cfg!(miri) {
            None
        } else {
            crate::pool::Pool::new()
        };
        for n in [1, 7, 16, 31, 32, 33, 255, 256, 257, 600] {
            let (x, exact) = crate::ops::gradcheck::column_data(&mut rng, 300, n);
            let mut got = vec![0.0f32; n];
            super::sum_rows_into_on(None, &mut got, &x);
            for (&g, &e) in got.iter().zip(&exact) {
                assert_eq!(g, e as f32, "width {n}");
            }
            // Accumulates onto what is there.
            let mut twice = got.clone();
            super::sum_rows_into_on(None, &mut twice, &x);
            for ((&t, &g), &e) in twice.iter().zip(&got).zip(&exact) {
                assert_eq!(t, (g as f64 + e) as f32);
            }
            // Columns split across two threads: the same bits.
            let mut split = vec![0.0f32; n];
            super::sum_rows_into_on(pool.as_ref(), &mut split, &x);
            assert_eq!(split, got, "width {n}, split");
            // Every instruction set: the same bits.
            for level in [Level::Baseline, Level::Avx2Fma] {
                let mut capped = vec![0.0f32; n];
                simd::with_level(level, || super::sum_rows_into_on(None, &mut capped, &x));
                assert_eq!(capped, got, "width {n}, {level:?}");
            }
        }
    }

    /// Sums tall enough to be cut into many column tasks: the same bits
    /// as one task, with the pool or without.
    #[test]
    #[cfg_attr(miri, ignore)] // large
    fn row_sums_cut_into_column_tasks_equal_one_task() {
        let (rows, n) = (4096, 600);
        let mut rng = crate::ops::gradcheck::Lcg(8);
        let (x, exact) = crate::ops::gradcheck::column_data(&mut rng, rows, n);
        let pool = crate::pool::Pool::new();
        for p in [None, pool.as_ref()] {
            let mut got = vec![0.0f32; n];
            super::sum_rows_into_on(p, &mut got, &x);
            for (&g, &e) in got.iter().zip(&exact) {
                assert_eq!(g, e as f32);
            }
        }
        // The cut itself: several tasks, whole groups of 8 columns, in order.
        let seen = std::sync::Mutex::new(Vec::new());
        super::split_columns(pool.as_ref(), &mut vec![0.0; n], rows, |part, first| {
            seen.lock().unwrap().push((first, part.len()))
        });
        let mut seen = seen.into_inner().unwrap();
        seen.sort();
        assert!(seen.len() > 4, "{seen:?}");
        let mut next = 0;
        for &(first, len) in &seen {
            assert_eq!(first, next);
            assert!(first % 8 == 0);
            next += len;
        }
        assert_eq!(next, n);
    }

    #[test]
    fn sum_of_squares_matches_a_sequential_f64_sum() {
        for n in [0, 1, 7, 8, 9, 1000] {
            let v: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 1e3).collect();
            let seq: f64 = v.iter().map(|&x| x as f64 * x as f64).sum();
            let got = super::sum_squares_f64(&v);
            assert!(
                (got - seq).abs() <= 1e-12 * seq.max(1.0),
                "n {n}: {got} vs {seq}"
            );
        }
    }

    #[test]
    fn reductions_match_plain_loops() {
        let v: Vec<f32> = (0..37).map(|i| (i as f32 * 0.37).sin()).collect();
        let plain: f32 = v.iter().sum();
        assert!((super::sum(&v) - plain).abs() < 1e-5);
        assert!((super::dot(&v, &v) - v.iter().map(|x| x * x).sum::<f32>()).abs() < 1e-5);
        assert_eq!(
            super::max(&v),
            v.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x))
        );
        assert_eq!(super::max(&[1.0, 5.0, -2.0]), 5.0);
    }

    #[test]
    fn exp_and_tanh_match_libm() {
        let mut worst_exp = 0.0f64;
        let mut worst_tanh = 0.0f64;
        for i in -87_300..88_300 {
            let x = i as f32 / 1000.0;
            let want = (x as f64).exp();
            worst_exp = worst_exp.max(((super::exp(x) as f64 - want) / want).abs());
            if x.abs() < 20.0 {
                worst_tanh = worst_tanh.max((super::tanh(x) as f64 - (x as f64).tanh()).abs());
            }
        }
        assert!(worst_exp < 5e-7, "exp relative error {worst_exp}");
        assert!(worst_tanh < 5e-7, "tanh absolute error {worst_tanh}");
        assert!(super::exp(f32::NAN).is_nan());
        assert_eq!(super::tanh(100.0), 1.0);
        assert_eq!(super::tanh(-100.0), -1.0);
    }

    /// exp_f64 over its range and ln_f64 over positive normals, against
    /// libm in f64: within 8e-16 relative (a few f64 ulps), exact at 0 and 1.
    #[test]
    fn exp_and_ln_f64_match_libm() {
        let steps = if cfg!(miri) { 500 } else { 2_000_000 };
        let mut worst_exp = 0.0f64;
        for i in 0..=steps {
            let x = -708.0 + 1417.0 * i as f64 / steps as f64;
            let want = x.exp();
            worst_exp = worst_exp.max(((super::exp_f64(x) - want) / want).abs());
        }
        let mut worst_ln = 0.0f64;
        for i in 0..=steps {
            // 1 to 3 densely (a logsumexp's sums), then 1e-300 to 1e300.
            let x = if i % 2 == 0 {
                1.0 + 2.0 * i as f64 / steps as f64
            } else {
                10f64.powf(-300.0 + 600.0 * i as f64 / steps as f64)
            };
            let want = x.ln();
            if want != 0.0 {
                worst_ln = worst_ln.max(((super::ln_f64(x) - want) / want).abs());
            }
        }
        // Miri's own exp and ln, the reference there, add a few ulps of
        // deliberate noise.
        let bound = if cfg!(miri) { 4e-15 } else { 8e-16 };
        assert!(worst_exp < bound, "exp_f64 relative error {worst_exp}");
        assert!(worst_ln < bound, "ln_f64 relative error {worst_ln}");
        assert_eq!(super::exp_f64(0.0), 1.0);
        assert_eq!(super::ln_f64(1.0), 0.0);
        assert!(super::exp_f64(f64::NAN).is_nan());
        println!("exp_f64 worst {worst_exp:e}, ln_f64 worst {worst_ln:e}");
    }
}
