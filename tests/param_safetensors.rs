//! A context's parameters in and out of safetensors files: every parameter
//! under its name with its exact bits; loads fill by name whatever the
//! creation order, and refuse a missing name, an extra name, a shape or
//! dtype mismatch, a truncated or damaged file, each with its status and a
//! message naming the tensor, changing nothing. When a Python with
//! `safetensors` and `numpy` is available (AG_PYTHON, else python3), Python
//! reads an exported file with the values ag_tensor_read gives; otherwise
//! that part is skipped with a message.

mod common;

use arenagrad::ffi::*;
use arenagrad::safetensors_io;
use arenagrad::{Context, Error, Tensor};
use common::ffi::last_error;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::ptr::{null, null_mut};

fn dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ag_param_st_{tag}_{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn values(c: &Context, p: Tensor) -> Vec<f32> {
    let mut v = vec![0.0; c.numel(p).unwrap()];
    c.read(p, &mut v).unwrap();
    v
}

/// All parameter values of a context, in creation order, as bits.
fn all_bits(c: &Context) -> Vec<Vec<u32>> {
    c.params().map(|p| bits(&values(c, p))).collect()
}

/// A small GPT-like set of parameters; `order` permutes creation.
fn model(order: &[usize]) -> Context {
    let specs: [(&str, &[usize]); 5] = [
        ("wte", &[5, 4]),
        ("h.0.attn.c_attn.weight", &[4, 12]),
        ("h.0.attn.c_attn.bias", &[12]),
        ("ln_f.weight", &[4]),
        ("stack", &[2, 3, 2]),
    ];
    let mut c = Context::new();
    for &i in order {
        let (name, shape) = specs[i];
        c.param_named(name, shape, None).unwrap();
    }
    c
}

fn filled(order: &[usize]) -> Context {
    let mut c = model(order);
    let ps: Vec<_> = c.params().collect();
    for p in ps {
        let name = c.param_name(p).unwrap().to_string();
        let n = c.numel(p).unwrap();
        let v: Vec<f32> = (0..n)
            .map(|i| ((i as f32 + 1.0) * 0.37 + name.len() as f32).sin() * 3.0)
            .collect();
        c.param_write(p, &v).unwrap();
    }
    c
}

#[test]
fn export_then_load_by_name_is_bit_exact() {
    let d = dir("rt");
    let path = d.join("m.safetensors");
    let src = filled(&[0, 1, 2, 3, 4]);
    src.safetensors_save(&path).unwrap();
    // The file: every parameter under its name, its shape, its bits.
    let file = safetensors_io::load(&path).unwrap();
    assert_eq!(file.len(), 5);
    for t in &file {
        let p = src.param_by_name(&t.name).unwrap();
        assert_eq!(t.shape, src.shape(p).unwrap().dims(), "{}", t.name);
        assert_eq!(bits(&t.data), bits(&values(&src, p)), "{}", t.name);
    }
    // Another creation order: filled by name.
    let mut dst = model(&[4, 2, 0, 3, 1]);
    dst.safetensors_load(&path).unwrap();
    for p in src.params() {
        let name = src.param_name(p).unwrap();
        let q = dst.param_by_name(name).unwrap();
        assert_eq!(bits(&values(&dst, q)), bits(&values(&src, p)), "{name}");
    }
    // From bytes, and the bytes are the file.
    let bytes = src.safetensors_bytes().unwrap();
    assert_eq!(bytes, std::fs::read(&path).unwrap());
    let mut dst2 = model(&[0, 1, 2, 3, 4]);
    dst2.safetensors_load_bytes(&bytes).unwrap();
    assert_eq!(all_bits(&dst2), all_bits(&src));
    std::fs::remove_dir_all(&d).unwrap();
}

/// Loading keeps the optimizer's state and gradients; only values change.
#[test]
fn load_changes_values_only() {
    let src = filled(&[0, 1, 2, 3, 4]);
    let bytes = src.safetensors_bytes().unwrap();
    let mut c = model(&[0, 1, 2, 3, 4]);
    c.optimizer(arenagrad::OptimizerKind::Sgd {
        lr: 0.1,
        momentum: 0.0,
        weight_decay: 0.0,
    })
    .unwrap();
    c.safetensors_load_bytes(&bytes).unwrap();
    assert_eq!(all_bits(&c), all_bits(&src));
    assert_eq!(c.optimizer_step_count(), 0);
}

/// A tensor as (name, shape, values), owned.
type Owned = (String, Vec<usize>, Vec<f32>);

fn mismatch(r: arenagrad::Result<()>, needles: &[&str]) {
    let e = r.unwrap_err();
    assert!(matches!(e, Error::Mismatch { .. }), "{e}");
    assert_eq!(e.status(), AG_STATUS_CHECKPOINT_MISMATCH);
    let msg = e.to_string();
    for n in needles {
        assert!(msg.contains(n), "{msg:?} lacks {n:?}");
    }
}

#[test]
fn every_mismatch_is_refused_naming_the_tensor_and_changes_nothing() {
    let src = filled(&[0, 1, 2, 3, 4]);
    let good = src.safetensors_bytes().unwrap();
    let mut dst = model(&[0, 1, 2, 3, 4]);
    let marker: Vec<f32> = vec![-7.5; 20];
    let wte = dst.param_by_name("wte").unwrap();
    dst.param_write(wte, &marker).unwrap();
    let before = all_bits(&dst);
    let tensors = safetensors_io::from_bytes(&good).unwrap();
    let rebuild = |f: &dyn Fn(&mut Vec<Owned>)| {
        let mut t: Vec<_> = tensors
            .iter()
            .map(|t| (t.name.clone(), t.shape.clone(), t.data.clone()))
            .collect();
        f(&mut t);
        let refs: Vec<_> = t
            .iter()
            .map(|(n, s, d)| (n.as_str(), s.as_slice(), d.as_slice()))
            .collect();
        safetensors_io::to_bytes(&refs).unwrap()
    };
    // A parameter missing from the file.
    let missing = rebuild(&|t| t.retain(|(n, _, _)| n != "ln_f.weight"));
    mismatch(
        dst.safetensors_load_bytes(&missing),
        &[
            "safetensors_load",
            "parameter `ln_f.weight` [4] is not in the file",
        ],
    );
    // A tensor the model does not have.
    let extra = rebuild(&|t| t.push(("lm_head.weight".into(), vec![2], vec![1.0, 2.0])));
    mismatch(
        dst.safetensors_load_bytes(&extra),
        &["tensor `lm_head.weight` [2] is not a parameter of the model"],
    );
    // A shape that differs (same element count, transposed).
    let shape = rebuild(&|t| {
        let e = t.iter_mut().find(|(n, _, _)| n == "wte").unwrap();
        e.1 = vec![4, 5];
    });
    mismatch(
        dst.safetensors_load_bytes(&shape),
        &["tensor `wte`: shape [4,5] in the file, [5,4] in the model"],
    );
    // A scalar does not fill a [1] parameter.
    let mut one = Context::new();
    one.param_named("s", &[1], None).unwrap();
    let scalar = safetensors_io::to_bytes(&[("s", &[], &[2.0])]).unwrap();
    mismatch(
        one.safetensors_load_bytes(&scalar),
        &["tensor `s`: shape []"],
    );
    // A float16 file fills a parameter (converted exactly); a dtype that
    // is not converted, a truncation, a flipped header byte are refused.
    let f16 = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/numpy_f16.safetensors"),
    )
    .unwrap();
    let mut half = Context::new();
    let h = half.param_named("half", &[3, 2], None).unwrap();
    half.safetensors_load_bytes(&f16).unwrap();
    let tiny = 2f32.powi(-24);
    assert_eq!(
        values(&half, h),
        [1.0, -2.5, tiny, -0.0, 65504.0, f32::INFINITY]
    );
    let i16_file = f16
        .windows(5)
        .position(|w| w == b"\"F16\"")
        .map(|at| [&f16[..at], b"\"I16\"", &f16[at + 5..]].concat())
        .unwrap();
    let e = half.safetensors_load_bytes(&i16_file).unwrap_err();
    assert_eq!(e.status(), AG_STATUS_CHECKPOINT_CORRUPT, "{e}");
    assert!(e.to_string().contains("tensor `half` has dtype I16"), "{e}");
    for cut in [0, 7, 8, 40, good.len() / 2, good.len() - 1] {
        let e = dst.safetensors_load_bytes(&good[..cut]).unwrap_err();
        assert_eq!(e.status(), AG_STATUS_CHECKPOINT_CORRUPT, "cut {cut}: {e}");
    }
    let mut flipped = good.clone();
    flipped[12] ^= 0x40;
    assert!(dst.safetensors_load_bytes(&flipped).is_err());
    assert_eq!(all_bits(&dst), before, "refused loads change nothing");
    // Empty model and empty file agree.
    let empty = safetensors_io::to_bytes(&[]).unwrap();
    Context::new().safetensors_load_bytes(&empty).unwrap();
}

fn zero() -> ag_tensor {
    ag_tensor {
        index: 0,
        context: 0,
        generation: 0,
    }
}

#[test]
fn c_api_save_load_and_statuses() {
    let d = dir("c");
    let path = CString::new(d.join("m.safetensors").to_str().unwrap()).unwrap();
    let mut a = null_mut();
    let mut b = null_mut();
    assert_eq!(ag_context_new(&mut a), AG_STATUS_OK);
    assert_eq!(ag_context_new(&mut b), AG_STATUS_OK);
    let (mut pa, mut pb, mut qa, mut qb) = (zero(), zero(), zero(), zero());
    let w: Vec<f32> = (0..6).map(|i| i as f32 * 0.5 - 1.0).collect();
    assert_eq!(
        ag_param_new_named(
            a,
            c"w".as_ptr(),
            [2usize, 3].as_ptr(),
            2,
            w.as_ptr(),
            &mut pa
        ),
        AG_STATUS_OK
    );
    assert_eq!(
        ag_param_new(a, [3usize].as_ptr(), 1, w.as_ptr(), &mut qa),
        AG_STATUS_OK
    );
    assert_eq!(ag_safetensors_save(a, path.as_ptr()), AG_STATUS_OK);
    // b: param.0 first, then w.
    assert_eq!(
        ag_param_new(b, [3usize].as_ptr(), 1, null(), &mut qb),
        AG_STATUS_OK
    );
    // The automatic name of b's first parameter is param.0, a's second is
    // param.1: the file's `param.1` has no parameter in b.
    assert_eq!(
        ag_param_new_named(b, c"w".as_ptr(), [2usize, 3].as_ptr(), 2, null(), &mut pb),
        AG_STATUS_OK
    );
    assert_eq!(
        ag_safetensors_load(b, path.as_ptr()),
        AG_STATUS_CHECKPOINT_MISMATCH
    );
    assert!(
        last_error(b).contains("tensor `param.1` [3] is not a parameter"),
        "{}",
        last_error(b)
    );
    let mut c = null_mut();
    assert_eq!(ag_context_new(&mut c), AG_STATUS_OK);
    let (mut pc, mut qc) = (zero(), zero());
    assert_eq!(
        ag_param_new_named(c, c"w".as_ptr(), [2usize, 3].as_ptr(), 2, null(), &mut pc),
        AG_STATUS_OK
    );
    assert_eq!(
        ag_param_new(c, [3usize].as_ptr(), 1, null(), &mut qc),
        AG_STATUS_OK
    );
    assert_eq!(ag_safetensors_load(c, path.as_ptr()), AG_STATUS_OK);
    let mut got = [0f32; 6];
    assert_eq!(ag_tensor_read(c, pc, got.as_mut_ptr(), 6), AG_STATUS_OK);
    assert_eq!(bits(&got), bits(&w));
    assert_eq!(ag_tensor_read(c, qc, got.as_mut_ptr(), 3), AG_STATUS_OK);
    assert_eq!(bits(&got[..3]), bits(&w[..3]));
    let missing = CString::new(d.join("none.safetensors").to_str().unwrap()).unwrap();
    assert_eq!(ag_safetensors_load(c, missing.as_ptr()), AG_STATUS_IO);
    assert_eq!(
        ag_safetensors_load(c, c"".as_ptr()),
        AG_STATUS_INVALID_ARGUMENT
    );
    assert_eq!(ag_safetensors_load(c, null()), AG_STATUS_NULL_ARGUMENT);
    assert_eq!(ag_safetensors_save(c, null()), AG_STATUS_NULL_ARGUMENT);
    let nodir = CString::new(d.join("no/such/m.safetensors").to_str().unwrap()).unwrap();
    assert_eq!(ag_safetensors_save(c, nodir.as_ptr()), AG_STATUS_IO);
    let _ = (qa, pb, qb);
    for mut x in [a, b, c] {
        assert_eq!(ag_context_free(&mut x), AG_STATUS_OK);
    }
    std::fs::remove_dir_all(&d).unwrap();
}

/// Python's reader sees each exported parameter with the bits
/// ag_tensor_read gives (through the C API, as a C program would).
#[test]
#[cfg_attr(miri, ignore)]
fn python_reads_an_export_with_the_values_tensor_read_gives() {
    let Some(py) = common::safetensors_python() else {
        eprintln!(
            "python_reads_an_export_with_the_values_tensor_read_gives: SKIPPED: no Python with \
             the `safetensors` and `numpy` packages (install them, e.g. `python3 -m venv v && \
             v/bin/pip install safetensors numpy`, and set AG_PYTHON=v/bin/python)"
        );
        return;
    };
    let d = dir("py");
    let path = d.join("m.safetensors");
    let cpath = CString::new(path.to_str().unwrap()).unwrap();
    let src = filled(&[0, 1, 2, 3, 4]);
    let bytes = src.safetensors_bytes().unwrap();
    let mut ctx = null_mut();
    assert_eq!(ag_context_new(&mut ctx), AG_STATUS_OK);
    let mut want = Vec::new();
    for t in safetensors_io::from_bytes(&bytes).unwrap() {
        let name = CString::new(t.name.clone()).unwrap();
        let mut p = zero();
        assert_eq!(
            ag_param_new_named(
                ctx,
                name.as_ptr(),
                t.shape.as_ptr(),
                t.shape.len(),
                t.data.as_ptr(),
                &mut p
            ),
            AG_STATUS_OK
        );
        let mut v = vec![0f32; t.data.len()];
        assert_eq!(
            ag_tensor_read(ctx, p, v.as_mut_ptr(), v.len()),
            AG_STATUS_OK
        );
        let hex: String = v
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .map(|b| format!("{b:02x}"))
            .collect();
        let shape: Vec<String> = t.shape.iter().map(|d| d.to_string()).collect();
        want.push(format!("{}\t{}\t{hex}", t.name, shape.join(",")));
    }
    assert_eq!(ag_safetensors_save(ctx, cpath.as_ptr()), AG_STATUS_OK);
    assert_eq!(ag_context_free(&mut ctx), AG_STATUS_OK);
    want.sort();
    let out = Command::new(&py)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/safetensors_fixtures.py"))
        .arg("read")
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = String::from_utf8(out.stdout).unwrap();
    assert_eq!(got.lines().collect::<Vec<_>>(), want);
    eprintln!(
        "python_reads_an_export...: {} tensors bit-exact with {py}",
        want.len()
    );
    std::fs::remove_dir_all(&d).unwrap();
}
