//! ag_param_init through the C entry point: every kind gives the values of
//! the Rust API for the same seed, and bad kinds, arguments and handles are
//! refused with their status and a message, leaving the values untouched.

mod common;

use arenagrad::ffi::*;
use arenagrad::{Context, Init};
use common::ffi::{last_error, ok};
use std::ptr::null_mut;

struct Ctx(*mut ag_context);

impl Drop for Ctx {
    fn drop(&mut self) {
        ok(ag_context_free(&mut self.0), "ag_context_free");
    }
}

fn param(c: &Ctx, shape: &[usize]) -> ag_tensor {
    let mut t = ag_tensor {
        index: 0,
        context: 0,
        generation: 0,
    };
    let init = vec![0.25f32; shape.iter().product()];
    ok(
        ag_param_new(c.0, shape.as_ptr(), shape.len(), init.as_ptr(), &mut t),
        "ag_param_new",
    );
    t
}

fn read(c: &Ctx, t: ag_tensor, n: usize) -> Vec<u32> {
    let mut v = vec![0.0f32; n];
    ok(ag_tensor_read(c.0, t, v.as_mut_ptr(), n), "ag_tensor_read");
    v.iter().map(|x| x.to_bits()).collect()
}

fn new_ctx() -> Ctx {
    let mut c = null_mut();
    ok(ag_context_new(&mut c), "ag_context_new");
    Ctx(c)
}

#[test]
fn every_kind_matches_the_rust_api() {
    let s2 = 2f32.sqrt();
    let cases = [
        (AG_INIT_ZEROS, 0.0, 0.0, Init::Zeros),
        (AG_INIT_ONES, 0.0, 0.0, Init::Ones),
        (
            AG_INIT_NORMAL,
            0.1,
            0.02,
            Init::Normal {
                mean: 0.1,
                std: 0.02,
            },
        ),
        (
            AG_INIT_UNIFORM,
            -0.5,
            2.0,
            Init::Uniform {
                low: -0.5,
                high: 2.0,
            },
        ),
        (
            AG_INIT_XAVIER_UNIFORM,
            1.0,
            0.0,
            Init::XavierUniform { gain: 1.0 },
        ),
        (
            AG_INIT_XAVIER_NORMAL,
            1.0,
            0.0,
            Init::XavierNormal { gain: 1.0 },
        ),
        (
            AG_INIT_KAIMING_UNIFORM,
            s2,
            0.0,
            Init::KaimingUniform { gain: s2 },
        ),
        (
            AG_INIT_KAIMING_NORMAL,
            s2,
            0.0,
            Init::KaimingNormal { gain: s2 },
        ),
    ];
    let shape = [24usize, 40];
    let n = 24 * 40;
    for (kind, a, b, init) in cases {
        let c = new_ctx();
        let _first = param(&c, &[3]);
        let w = param(&c, &shape);
        ok(ag_param_init(c.0, w, kind, a, b, 1234), "ag_param_init");
        let got = read(&c, w, n);

        let mut r = Context::new();
        r.param(&[3], None).unwrap();
        let rw = r.param(&shape, None).unwrap();
        r.param_init(rw, init, 1234).unwrap();
        let mut want = vec![0.0f32; n];
        r.read(rw, &mut want).unwrap();
        let want: Vec<u32> = want.iter().map(|x| x.to_bits()).collect();
        assert_eq!(got, want, "kind {kind}");
        if !matches!(init, Init::Zeros | Init::Ones) {
            let distinct: std::collections::BTreeSet<_> = got.iter().collect();
            assert!(distinct.len() > n * 9 / 10, "kind {kind}: values repeat");
        }
    }
}

#[test]
fn bad_kinds_arguments_and_handles_are_refused() {
    let c = new_ctx();
    let w = param(&c, &[4, 3]);
    let bias = param(&c, &[3]);
    let before = read(&c, w, 12);
    let ia = AG_STATUS_INVALID_ARGUMENT;
    let nan = f32::NAN;
    let cases: &[(u32, f32, f32, ag_status, &str)] = &[
        (8, 0.0, 1.0, ia, "kind 8 is not an AG_INIT_* value"),
        (u32::MAX, 0.0, 1.0, ia, "kind 4294967295"),
        (AG_INIT_NORMAL, 0.0, -1.0, ia, "std = -1 must be >= 0"),
        (AG_INIT_NORMAL, nan, 1.0, ia, "mean = NaN must be finite"),
        (
            AG_INIT_NORMAL,
            0.0,
            f32::INFINITY,
            ia,
            "std = inf must be finite",
        ),
        (AG_INIT_UNIFORM, 2.0, 1.0, ia, "low = 2 must be <= high = 1"),
        (AG_INIT_UNIFORM, 0.0, nan, ia, "high = NaN must be finite"),
        (AG_INIT_XAVIER_UNIFORM, 0.0, 0.0, ia, "gain = 0 must be > 0"),
        (
            AG_INIT_KAIMING_NORMAL,
            -1.0,
            0.0,
            ia,
            "gain = -1 must be > 0",
        ),
        (AG_INIT_KAIMING_UNIFORM, 1.0, 3.0, ia, "b = 3 is unused"),
        (
            AG_INIT_ZEROS,
            1.0,
            0.0,
            ia,
            "a = 1 is unused by AG_INIT_ZEROS",
        ),
    ];
    for &(kind, a, b, want, msg) in cases {
        assert_eq!(ag_param_init(c.0, w, kind, a, b, 1), want, "kind {kind}");
        let e = last_error(c.0);
        assert!(
            e.contains("ag_param_init") || e.contains("param_init"),
            "{e}"
        );
        assert!(e.contains(msg), "kind {kind}: {e}");
    }
    assert_eq!(
        ag_param_init(c.0, bias, AG_INIT_XAVIER_NORMAL, 1.0, 0.0, 1),
        AG_STATUS_SHAPE_MISMATCH
    );
    assert!(last_error(c.0).contains("rank >= 2"));
    assert_eq!(read(&c, w, 12), before, "a refused call changed the values");

    // Not a parameter, then the same handle after ag_reset (stale).
    let mut act = w;
    let shape = [2usize];
    ok(
        ag_tensor_new(c.0, shape.as_ptr(), 1, [1.0f32, 2.0].as_ptr(), &mut act),
        "ag_tensor_new",
    );
    assert_eq!(ag_param_init(c.0, act, AG_INIT_ONES, 0.0, 0.0, 1), ia);
    assert!(last_error(c.0).contains("not a parameter"));
    ok(ag_reset(c.0), "ag_reset");
    assert_eq!(
        ag_param_init(c.0, act, AG_INIT_ONES, 0.0, 0.0, 1),
        AG_STATUS_STALE_HANDLE
    );
    // A parameter of another context; a NULL context.
    let other = new_ctx();
    let ow = param(&other, &[4, 3]);
    assert_eq!(
        ag_param_init(c.0, ow, AG_INIT_ONES, 0.0, 0.0, 1),
        AG_STATUS_WRONG_CONTEXT
    );
    assert_eq!(
        ag_param_init(null_mut(), w, AG_INIT_ONES, 0.0, 0.0, 1),
        AG_STATUS_NULL_ARGUMENT
    );
    assert_eq!(read(&c, w, 12), before);
    // And the context still works.
    ok(
        ag_param_init(c.0, w, AG_INIT_ONES, 0.0, 0.0, 1),
        "ag_param_init",
    );
    assert!(read(&c, w, 12).iter().all(|&b| b == 1f32.to_bits()));
}
