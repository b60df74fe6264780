//! The safe `sgemm` against the reference loop, the split products, and
//! the kernels in use.

use super::blocks::{UnitLayout, UnitsOut, split_units};
use super::runtime::cpu;
use super::*;

fn lcg(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect()
}

#[test]
fn matches_naive_for_all_transposes_and_odd_sizes() {
    for &(m, n, k) in &[(1, 1, 1), (3, 5, 7), (17, 1, 9), (8, 32, 16), (5, 3, 1)] {
        for ta in [false, true] {
            for tb in [false, true] {
                let g = Gemm::dense(ta, tb, m, n, k);
                let a = lcg(m * k, 1);
                let b = lcg(k * n, 2);
                let mut c1 = lcg(m * n, 3);
                let mut c2 = c1.clone();
                sgemm(g, 0.7, &a, &b, 0.5, &mut c1);
                naive_sgemm(g, 0.7, &a, &b, 0.5, &mut c2);
                let num: f32 = c1.iter().zip(&c2).map(|(x, y)| (x - y) * (x - y)).sum();
                let den: f32 = c2.iter().map(|y| y * y).sum::<f32>().max(1e-12);
                assert!(
                    num / den < 1e-7,
                    "nmse {} for {m}x{n}x{k} ta={ta} tb={tb}",
                    num / den
                );
            }
        }
    }
}

#[test]
#[cfg_attr(miri, ignore)] // the worker is off under Miri, and the sizes are slow there
fn split_products_match_naive() {
    // As a context does: OpenBLAS's own threads would split differently.
    set_blas_threads(1);
    let pool = crate::pool::Pool::new().unwrap();
    for &(m, n, k) in &[(200, 300, 100), (77, 128, 1024), (1024, 384, 128)] {
        for ta in [false, true] {
            for tb in [false, true] {
                let g = Gemm::dense(ta, tb, m, n, k);
                let (a, b) = (lcg(m * k, 4), lcg(k * n, 5));
                let mut c1 = lcg(m * n, 6);
                let (mut c2, mut c3) = (c1.clone(), c1.clone());
                sgemm_on(Some(&pool), g, 1.0, &a, &b, 1.0, &mut c1);
                naive_sgemm(g, 1.0, &a, &b, 1.0, &mut c2);
                let num: f32 = c1.iter().zip(&c2).map(|(x, y)| (x - y) * (x - y)).sum();
                let den: f32 = c2.iter().map(|y| y * y).sum();
                assert!(num / den < 1e-7, "{m}x{n}x{k} ta={ta} tb={tb}");
                // One thread, same split: the same bits.
                sgemm_on(None, g, 1.0, &a, &b, 1.0, &mut c3);
                assert!(c1.iter().zip(&c3).all(|(x, y)| x.to_bits() == y.to_bits()));
                if !ta && !tb {
                    let bias = lcg(n, 7);
                    let (mut d1, mut d2) = (vec![0.0; m * n], vec![1.0; m * n]);
                    sgemm_bias_on(Some(&pool), sgemm_tile, g, &a, &b, &bias, &mut d1);
                    sgemm_bias_on(None, sgemm_tile, g, &a, &b, &bias, &mut d2);
                    assert!(d1.iter().zip(&d2).all(|(x, y)| x.to_bits() == y.to_bits()));
                    let mut d3: Vec<f32> = (0..m * n).map(|i| bias[i % n]).collect();
                    sgemm(g, 1.0, &a, &b, 1.0, &mut d3);
                    let num: f32 = d1.iter().zip(&d3).map(|(x, y)| (x - y) * (x - y)).sum();
                    let den: f32 = d3.iter().map(|y| y * y).sum();
                    assert!(num / den < 1e-12, "bias {m}x{n}x{k}");
                }
            }
        }
    }
}

/// Whatever OpenBLAS picked at load, the kernels in use after the
/// first product are not below the CPU's instruction set (unless the
/// user chose them, or the BLAS cannot switch and said so).
#[test]
#[cfg_attr(miri, ignore)]
fn kernels_in_use_match_the_cpu() {
    let g = Gemm::dense(false, false, 2, 2, 2);
    let mut c = [0.0; 4];
    sgemm(g, 1.0, &[1.0; 4], &[1.0; 4], 0.0, &mut c);
    assert_eq!(c, [2.0; 4]);
    let info = gemm_info();
    let user_set = ["OPENBLAS_CORETYPE", "AG_BLAS_CORE"]
        .iter()
        .any(|k| std::env::var_os(k).is_some());
    if cfg!(target_os = "linux")
        && !user_set
        && info.library == "OpenBLAS"
        && !info.note.contains("set OPENBLAS_CORETYPE")
    {
        let running = choice::core_isa(&info.kernels);
        let cpu = cpu();
        if cpu.best_core().is_some() {
            assert!(running >= Some(cpu.isa()), "{info:?}");
        }
    }
    assert!(!info.library.is_empty());
}

#[test]
#[should_panic(expected = "too short")]
fn short_slice_panics_before_blas() {
    let g = Gemm::dense(false, false, 2, 2, 2);
    let mut c = [0.0; 4];
    sgemm(g, 1.0, &[0.0; 3], &[0.0; 4], 0.0, &mut c);
}

/// A product whose C is one column runs as sgemv, one of two columns (over
/// a small A) as two: every transpose, strided operands (lda, ldb, ldc
/// wider than the shapes), alpha and beta, against the reference loop;
/// with beta = 0 a NaN already in C is overwritten.
#[test]
fn one_and_two_column_products_match_naive() {
    // Under Miri every product is the naive sgemm: one column is enough.
    let columns: &[usize] = if cfg!(miri) { &[1] } else { &[1, 2] };
    for &n in columns {
        for &(m, k) in &[(1, 1), (3020, 3), (7, 10), (65, 1)] {
            for ta in [false, true] {
                for tb in [false, true] {
                    let g = Gemm {
                        lda: if ta { m + 2 } else { k + 3 },
                        ldb: if tb { k + 1 } else { 4 },
                        ldc: 3,
                        ..Gemm::dense(ta, tb, m, n, k)
                    };
                    let (ar, ac) = if ta { (k, m) } else { (m, k) };
                    let (br, bc) = if tb { (n, k) } else { (k, n) };
                    let a = lcg(Gemm::needed(ar, ac, g.lda), 8);
                    let b = lcg(Gemm::needed(br, bc, g.ldb), 9);
                    for beta in [0.0, 0.5] {
                        let mut c1 = lcg(Gemm::needed(m, n, g.ldc), 10);
                        if beta == 0.0 {
                            c1[n - 1] = f32::NAN;
                        }
                        let mut c2 = c1.clone();
                        let between = c1.clone();
                        // SAFETY: c1 covers the tile and nothing else uses it.
                        unsafe { gemv::product_tile(g, 0.7, &a, &b, beta, c1.as_mut_ptr()) };
                        naive_sgemm(g, 0.7, &a, &b, beta, &mut c2);
                        for (i, ((x, y), z)) in c1.iter().zip(&c2).zip(&between).enumerate() {
                            // The message is formatted on failure only (Miri
                            // runs this test, and a format per element took it
                            // minutes).
                            let what =
                                || format!("{m}x{n}x{k} ta={ta} tb={tb} beta={beta}: C[{i}]");
                            if i % g.ldc < n {
                                let tol = 1e-5 * (1.0 + y.abs()) * k as f32;
                                assert!((x - y).abs() <= tol, "{} {x} vs {y}", what());
                            } else {
                                assert_eq!(
                                    x.to_bits(),
                                    z.to_bits(),
                                    "{}: between the rows of C",
                                    what()
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Split across the pool by rows, a one-column product gives the bits of
/// the same tiles run on one thread.
#[test]
#[cfg_attr(miri, ignore)] // the worker is off under Miri, and the sizes are slow there
fn split_one_column_products_keep_their_bits() {
    set_blas_threads(1);
    let pool = crate::pool::Pool::new().unwrap();
    let (m, k) = (70_000, 256);
    assert!(tiling::tiles(m, 1, k).0 > 1);
    for ta in [false, true] {
        let g = Gemm::dense(ta, false, m, 1, k);
        let (a, b) = (lcg(m * k, 11), lcg(k, 12));
        let mut c1 = vec![0.0; m];
        let mut c2 = vec![0.0; m];
        gemv::product_on(Some(&pool), g, 1.0, &a, &b, 0.0, &mut c1);
        gemv::product_on(None, g, 1.0, &a, &b, 0.0, &mut c2);
        assert!(c1.iter().zip(&c2).all(|(x, y)| x.to_bits() == y.to_bits()));
        let mut c3 = vec![0.0; m];
        naive_sgemm(g, 1.0, &a, &b, 0.0, &mut c3);
        let num: f32 = c1.iter().zip(&c3).map(|(x, y)| (x - y) * (x - y)).sum();
        let den: f32 = c3.iter().map(|y| y * y).sum();
        assert!(num / den < 1e-10, "ta={ta}: nmse {}", num / den);
    }
}

/// Every cut of C: a power-of-two count of tiles, no side below 64 unless
/// C itself is narrower, at least 16 tiles when the work allows them.
#[test]
fn tiles_are_powers_of_two_of_sizable_sides() {
    let sides = [1, 63, 64, 100, 768, 1024, 3072, 50_257];
    for &m in &sides {
        for &n in &sides {
            for &k in &[1, 64, 768, 50_257] {
                let (rows, cols) = tiling::tiles(m, n, k);
                let count = rows * cols;
                assert!(
                    count.is_power_of_two() && count <= 64,
                    "{m}x{n}x{k}: {rows}x{cols}"
                );
                assert!(rows == 1 || m / rows >= 64, "{m}x{n}x{k}: {rows} row tiles");
                assert!(
                    cols == 1 || n / cols >= 64,
                    "{m}x{n}x{k}: {cols} column tiles"
                );
                let work_allows = m * n * k >= 16 << 23 && m >= 256 && n >= 256;
                assert!(!work_allows || count >= 16, "{m}x{n}x{k}: {rows}x{cols}");
            }
        }
    }
    // A wide C (a language model's head) is cut by columns alone: each
    // band of rows would pack all 50,257 columns of op(B) again.
    assert_eq!(tiling::tiles(1024, 50_257, 768), (1, 64));
    // A square-ish C is cut both ways.
    assert_eq!(tiling::tiles(1024, 768, 768), (4, 4));
}

/// Units of a `[2 * 3, 3 * 4 * 2]` output (2 row blocks of 3 rows, 4
/// units a row, 3 parts of 2 columns each) in 3 tasks on their own
/// threads: each unit's product lands in its blocks, as `sgemm` puts it
/// into a slice at the same offset, and nothing else is written.
#[test]
fn unit_blocks_take_each_units_products() {
    let layout = UnitLayout {
        row_blocks: 2,
        rows: 3,
        per_row: 4,
        parts: 3,
        width: 2,
    };
    let ld = layout.ld();
    let g = Gemm {
        ldc: ld,
        ..Gemm::dense(false, false, 2, 2, 5)
    };
    // Unit u, part s: rows 1..3 of its block get A_u B_s, beta 0.5 over
    // the starting values.
    let a = |u: usize| lcg(2 * 5, 10 + u as u32);
    let b = |s: usize| lcg(5 * 2, 50 + s as u32);
    let start = lcg(layout.row_blocks * layout.rows * ld, 7);
    let mut want = start.clone();
    for u in 0..layout.units() {
        let (r, j) = (u / 4, u % 4);
        for s in 0..3 {
            let at = (r * 3 + 1) * ld + (s * 4 + j) * 2;
            sgemm(g, 0.7, &a(u), &b(s), 0.5, &mut want[at..]);
        }
    }
    let mut got = start;
    std::thread::scope(|scope| {
        for mut out in split_units(&mut got, layout, 3) {
            scope.spawn(move || {
                for u in out.units() {
                    for s in 0..3 {
                        out.sgemm(u, s, 1, g, 0.7, &a(u), &b(s), 0.5);
                    }
                }
            });
        }
    });
    assert_eq!(
        got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        want.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
    );
}

/// The runs of the tasks cover every unit once, in order.
#[test]
fn unit_runs_cover_the_units() {
    let layout = UnitLayout {
        row_blocks: 3,
        rows: 2,
        per_row: 5,
        parts: 1,
        width: 1,
    };
    let mut out = vec![0.0; 30];
    for tasks in 1..=16 {
        let mut next = 0;
        for part in split_units(&mut out, layout, tasks) {
            assert_eq!(part.units().start, next);
            next = part.units().end;
        }
        assert_eq!(next, 15, "{tasks} tasks");
    }
}

fn two_unit_handles(out: &mut [f32]) -> [UnitsOut<'_>; 2] {
    let layout = UnitLayout {
        row_blocks: 1,
        rows: 4,
        per_row: 2,
        parts: 2,
        width: 3,
    };
    let mut it = split_units(out, layout, 2);
    [it.next().unwrap(), it.next().unwrap()]
}

#[test]
#[should_panic(expected = "unit not owned")]
fn unit_blocks_refuse_another_tasks_unit() {
    let mut out = vec![0.0; 4 * 12];
    let [mut first, _] = two_unit_handles(&mut out);
    let g = Gemm {
        ldc: 12,
        ..Gemm::dense(false, false, 1, 3, 1)
    };
    first.sgemm(1, 0, 0, g, 1.0, &[1.0], &[1.0; 3], 0.0);
}

#[test]
#[should_panic(expected = "columns leave the block")]
fn unit_blocks_refuse_a_tile_wider_than_the_block() {
    let mut out = vec![0.0; 4 * 12];
    let [mut first, _] = two_unit_handles(&mut out);
    let g = Gemm {
        ldc: 12,
        ..Gemm::dense(false, false, 1, 4, 1)
    };
    first.sgemm(0, 0, 0, g, 1.0, &[1.0], &[1.0; 4], 0.0);
}

#[test]
#[should_panic(expected = "rows leave the block")]
fn unit_blocks_refuse_rows_past_the_block() {
    let mut out = vec![0.0; 4 * 12];
    let [_, mut second] = two_unit_handles(&mut out);
    let g = Gemm {
        ldc: 12,
        ..Gemm::dense(false, false, 2, 3, 1)
    };
    second.sgemm(1, 1, 3, g, 1.0, &[1.0; 2], &[1.0; 3], 0.0);
}

#[test]
#[should_panic(expected = "C's row stride")]
fn unit_blocks_refuse_another_row_stride() {
    let mut out = vec![0.0; 4 * 12];
    let [mut first, _] = two_unit_handles(&mut out);
    let g = Gemm {
        ldc: 6,
        ..Gemm::dense(false, false, 2, 3, 1)
    };
    first.sgemm(0, 0, 0, g, 1.0, &[1.0; 2], &[1.0; 3], 0.0);
}
