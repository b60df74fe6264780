//! Parameters by name: automatic and given names, uniqueness (automatic names
//! included), listing by index, and reading names back through the C
//! entry points (length query, exact fit, too small a buffer), and
//! per-parameter weight decay.

mod common;

use arenagrad::ffi::*;
use arenagrad::{Context, Error};
use common::ffi::{last_error, ok};
use std::ffi::{CStr, CString};
use std::ptr::{null, null_mut};

fn invalid(e: Error, needles: &[&str]) {
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let msg = e.to_string();
    for n in needles {
        assert!(msg.contains(n), "{msg:?} lacks {n:?}");
    }
}

#[test]
fn names_are_given_or_automatic_and_listed_in_creation_order() {
    let mut c = Context::new();
    let a = c.param(&[2, 3], None).unwrap();
    let w = c.param_named("h.0.mlp.c_fc.weight", &[3, 4], None).unwrap();
    let b = c.param(&[4], None).unwrap();
    let e = c.param_named("é.ü", &[1], None).unwrap();
    assert_eq!(c.param_count(), 4);
    let listed: Vec<_> = (0..4).map(|i| c.param_at(i).unwrap()).collect();
    assert_eq!(listed, [a, w, b, e]);
    assert_eq!(c.params().collect::<Vec<_>>(), listed);
    let names: Vec<_> = listed.iter().map(|&p| c.param_name(p).unwrap()).collect();
    assert_eq!(names, ["param.0", "h.0.mlp.c_fc.weight", "param.2", "é.ü"]);
    assert_eq!(c.param_by_name("param.2"), Some(b));
    assert_eq!(c.param_by_name("nope"), None);
    invalid(
        c.param_at(4).unwrap_err(),
        &["param_at", "index 4", "count 4"],
    );
    // An activation has no name.
    let x = c.tensor(&[1], &[1.0]).unwrap();
    invalid(c.param_name(x).unwrap_err(), &["not a parameter"]);
}

#[test]
fn duplicate_and_bad_names_are_refused_and_change_nothing() {
    let mut c = Context::new();
    c.param_named("w", &[2], None).unwrap();
    c.param(&[2], None).unwrap(); // param.1
    invalid(
        c.param_named("w", &[3], None).unwrap_err(),
        &["`w`", "new parameter 2", "parameter 0"],
    );
    // A given name equal to an automatic one, and the other way round.
    invalid(
        c.param_named("param.1", &[3], None).unwrap_err(),
        &["`param.1`", "parameter 1"],
    );
    c.param_named("param.3", &[1], None).unwrap(); // index 2
    invalid(
        c.param(&[1], None).unwrap_err(), // would be param.3
        &["`param.3`", "new parameter 3", "parameter 2"],
    );
    let long = "x".repeat(arenagrad::MAX_PARAM_NAME_BYTES + 1);
    let max = "y".repeat(arenagrad::MAX_PARAM_NAME_BYTES);
    for (name, needle) in [
        ("", "empty"),
        (long.as_str(), "longer than 255 bytes"),
        ("a\0b", "NUL"),
        ("__metadata__", "reserved"),
    ] {
        invalid(c.param_named(name, &[1], None).unwrap_err(), &[needle]);
    }
    assert_eq!(c.param_count(), 3, "refused names make no parameter");
    c.param_named(&max, &[1], None).unwrap();
    assert_eq!(c.param_count(), 4);
    // Sequence errors still come before names are looked at.
    let _ = c.tensor(&[1], &[0.0]).unwrap();
    let e = c.param_named("late", &[1], None).unwrap_err();
    assert!(matches!(e, Error::Sequence { .. }), "{e}");
}

#[test]
fn c_api_names_counts_and_buffers() {
    let mut c = null_mut();
    ok(ag_context_new(&mut c), "ag_context_new");
    let zero = ag_tensor {
        index: 0,
        context: 0,
        generation: 0,
    };
    let (mut p0, mut p1) = (zero, zero);
    ok(
        ag_param_new(c, [2usize, 3].as_ptr(), 2, null(), &mut p0),
        "ag_param_new",
    );
    let name = CString::new("wte").unwrap();
    ok(
        ag_param_new_named(c, name.as_ptr(), [5usize].as_ptr(), 1, null(), &mut p1),
        "ag_param_new_named",
    );
    let mut n = 0usize;
    ok(ag_param_count(c, &mut n), "ag_param_count");
    assert_eq!(n, 2);
    let mut t = zero;
    ok(ag_param_at(c, 1, &mut t), "ag_param_at");
    assert_eq!(t, p1);
    assert_eq!(ag_param_at(c, 2, &mut t), AG_STATUS_INVALID_ARGUMENT);
    assert!(last_error(c).contains("index 2"), "{}", last_error(c));
    assert_eq!(t, p1, "nothing written on failure");

    // Length query, exact fit, one byte short.
    let mut len = 99usize;
    ok(ag_param_name(c, p0, null_mut(), 0, &mut len), "length");
    assert_eq!(len, "param.0".len());
    let mut buf = [b'#' as std::ffi::c_char; 16];
    ok(ag_param_name(c, p0, buf.as_mut_ptr(), 8, &mut len), "exact");
    // SAFETY: NUL-terminated by the call.
    assert_eq!(unsafe { CStr::from_ptr(buf.as_ptr()) }, c"param.0");
    let mut buf = [b'#' as std::ffi::c_char; 16];
    let mut len = 99usize;
    assert_eq!(
        ag_param_name(c, p1, buf.as_mut_ptr(), 3, &mut len),
        AG_STATUS_INVALID_ARGUMENT
    );
    assert!(last_error(c).contains("`wte`"), "{}", last_error(c));
    assert!(buf.iter().all(|&b| b == b'#' as std::ffi::c_char) && len == 99);
    assert_eq!(
        ag_param_name(c, p1, null_mut(), 4, &mut len),
        AG_STATUS_NULL_ARGUMENT
    );
    assert_eq!(
        ag_param_name(c, p1, buf.as_mut_ptr(), 4, null_mut()),
        AG_STATUS_NULL_ARGUMENT
    );

    // Duplicates and bad strings through C.
    assert_eq!(
        ag_param_new_named(c, name.as_ptr(), [1usize].as_ptr(), 1, null(), &mut t),
        AG_STATUS_INVALID_ARGUMENT
    );
    assert!(
        last_error(c).contains("`wte`") && last_error(c).contains("parameter 1"),
        "{}",
        last_error(c)
    );
    let bad = [0xffu8, 0];
    assert_eq!(
        ag_param_new_named(c, bad.as_ptr().cast(), [1usize].as_ptr(), 1, null(), &mut t),
        AG_STATUS_INVALID_ARGUMENT
    );
    assert!(last_error(c).contains("UTF-8"), "{}", last_error(c));
    assert_eq!(
        ag_param_new_named(c, null(), [1usize].as_ptr(), 1, null(), &mut t),
        AG_STATUS_NULL_ARGUMENT
    );
    ok(ag_param_count(c, &mut n), "ag_param_count");
    assert_eq!(n, 2);
    ok(ag_context_free(&mut c), "ag_context_free");
}

/// Per-parameter weight decay: with a zero gradient, a parameter whose
/// decay is off is left bit-identical by SGD (with and without momentum)
/// and AdamW, while one with decay on shrinks by exactly the decay step.
/// The flag can be set before or after the optimizer is made.
#[test]
fn weight_decay_off_leaves_a_parameter_unchanged() {
    use arenagrad::OptimizerKind;
    let kinds = [
        OptimizerKind::Sgd {
            lr: 0.5,
            momentum: 0.0,
            weight_decay: 0.1,
        },
        OptimizerKind::Sgd {
            lr: 0.5,
            momentum: 0.9,
            weight_decay: 0.1,
        },
        OptimizerKind::AdamW {
            lr: 0.5,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.1,
        },
    ];
    let init = [1.0f32, -2.0, 0.75, 4.0];
    for kind in kinds {
        for set_after in [false, true] {
            let mut c = Context::new();
            let on = c.param_named("w", &[2, 2], Some(&init)).unwrap();
            let off = c.param_named("b", &[4], Some(&init)).unwrap();
            assert!(c.weight_decay(off).unwrap(), "on by default");
            if !set_after {
                c.set_weight_decay(off, false).unwrap();
            }
            c.optimizer(kind).unwrap();
            if set_after {
                c.set_weight_decay(off, false).unwrap();
            }
            assert!(!c.weight_decay(off).unwrap() && c.weight_decay(on).unwrap());
            for _ in 0..3 {
                c.reset();
                // loss = 0 * sum(w) + 0 * sum(b): both gradients are zero.
                let a = c.sum(on).unwrap();
                let b = c.sum(off).unwrap();
                let s = c.add(a, b).unwrap();
                let loss = c.scale(s, 0.0).unwrap();
                c.backward(loss).unwrap();
                c.optimizer_step().unwrap();
                c.zero_grad();
            }
            let mut v = [0f32; 4];
            c.read(off, &mut v).unwrap();
            assert_eq!(bits(&v), bits(&init), "{kind:?}: decay off");
            c.read(on, &mut v).unwrap();
            for (got, x) in v.iter().zip(init) {
                assert!(
                    got.abs() < x.abs() * 0.99,
                    "{kind:?}: decay on: {got} from {x}"
                );
            }
        }
    }
    let mut c = Context::new();
    let x = c.tensor(&[1], &[1.0]).unwrap();
    invalid(
        c.set_weight_decay(x, false).unwrap_err(),
        &["not a parameter"],
    );
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}
