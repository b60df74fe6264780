//! Safetensors files shared with Python's `safetensors` package (the
//! format's reference implementation): files it wrote load here with the
//! exact values, and files written here load there with the exact values.
//!
//! tests/data/ holds files written once by scripts/safetensors_fixtures.py,
//! so the first direction is always checked. When a Python with the
//! `safetensors` and `numpy` packages is available (AG_PYTHON, else
//! python3), both directions are also checked live; otherwise that part is
//! skipped with a message saying how to enable it.

mod common;

use arenagrad::safetensors_io::{self, NamedTensor};
use arenagrad::{Error, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// What scripts/safetensors_fixtures.py writes, computed here.
fn expected() -> Vec<(&'static str, Vec<usize>, Vec<f32>)> {
    vec![
        ("h.0.ln_1.bias", vec![4], vec![-0.0, 1e-40, 3.4e38, 1.5]),
        ("scalar", vec![], vec![2.5]),
        (
            "wte",
            vec![3, 4],
            (0..12).map(|i| i as f32 * 0.25 - 1.0).collect(),
        ),
    ]
}

/// The values of numpy_f16.safetensors and handmade_bf16.safetensors, each
/// half-precision value exactly an f32.
fn expected_half() -> [(&'static str, Vec<f32>); 2] {
    let tiny = 2f32.powi(-24); // binary16's smallest subnormal
    let bf_tiny = 2f32.powi(-133); // bfloat16's
    [
        ("half", vec![1.0, -2.5, tiny, -0.0, 65504.0, f32::INFINITY]),
        (
            "brain",
            vec![
                1.0,
                -1.5,
                bf_tiny,
                255.0 * 2f32.powi(120),
                f32::NEG_INFINITY,
                -0.0,
            ],
        ),
    ]
}

fn check_python_written(
    got: Result<Vec<NamedTensor>>,
    f16: Result<Vec<NamedTensor>>,
    bf16: Result<Vec<NamedTensor>>,
) {
    let got = got.expect("a file written by Python's safetensors loads");
    let want = expected();
    assert_eq!(got.len(), want.len());
    for (t, (name, shape, data)) in got.iter().zip(&want) {
        assert_eq!((t.name.as_str(), &t.shape), (*name, shape));
        assert_eq!(bits(&t.data), bits(data), "{name}");
    }
    for (file, (name, data)) in [f16, bf16].into_iter().zip(expected_half()) {
        let file = file.expect("a float16 or bfloat16 file loads");
        assert_eq!(file.len(), 1);
        assert_eq!(
            (file[0].name.as_str(), &file[0].shape[..]),
            (name, &[3, 2][..])
        );
        assert_eq!(bits(&file[0].data), bits(&data), "{name}");
    }
}

/// A dtype that is neither F32, F16 nor BF16 is refused, naming it.
#[test]
fn other_dtypes_are_refused_by_name() {
    let data = [0u8; 8];
    let header = r#"{"d":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}"#;
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header.as_bytes());
    file.extend_from_slice(&data);
    let e = safetensors_io::from_bytes(&file).unwrap_err();
    assert!(matches!(e, Error::BadFile { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("tensor `d` has dtype F64; only F32, F16 and BF16 are supported"),
        "{e}"
    );
}

#[test]
fn committed_files_written_by_python_load_exactly() {
    let d = root().join("tests/data");
    check_python_written(
        safetensors_io::load(&d.join("numpy_written.safetensors")),
        safetensors_io::load(&d.join("numpy_f16.safetensors")),
        safetensors_io::load(&d.join("handmade_bf16.safetensors")),
    );
}

fn run(py: &str, args: &[&Path]) -> String {
    let script = root().join("scripts/safetensors_fixtures.py");
    let out = Command::new(py)
        .arg(&script)
        .args(args)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
#[cfg_attr(miri, ignore)]
fn live_round_trips_with_python() {
    let Some(py) = common::safetensors_python() else {
        eprintln!(
            "live_round_trips_with_python: SKIPPED: no Python with the `safetensors` and `numpy` \
             packages (install them, e.g. `python3 -m venv v && v/bin/pip install safetensors numpy`, \
             and set AG_PYTHON=v/bin/python); the committed files were still checked"
        );
        return;
    };
    let dir = std::env::temp_dir().join(format!("ag_st_py_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Python writes, we read.
    run(&py, &[Path::new("write"), &dir]);
    check_python_written(
        safetensors_io::load(&dir.join("numpy_written.safetensors")),
        safetensors_io::load(&dir.join("numpy_f16.safetensors")),
        safetensors_io::load(&dir.join("handmade_bf16.safetensors")),
    );
    // We write, Python reads: names, shapes and every bit.
    let w: Vec<f32> = (0..24).map(|i| (i as f32 * 0.7).sin() * 1e3).collect();
    let special = [f32::MIN_POSITIVE / 8.0, -0.0, f32::MAX, -1.5];
    let path = dir.join("ours.safetensors");
    safetensors_io::save(
        &path,
        &[
            ("h.0.attn.c_attn.weight", &[2, 3, 4], &w),
            ("b", &[4], &special),
            ("s", &[], &[9.0]),
        ],
    )
    .unwrap();
    let hex = |v: &[f32]| -> String {
        v.iter()
            .flat_map(|x| x.to_le_bytes())
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let want = format!(
        "b\t4\t{}\nh.0.attn.c_attn.weight\t2,3,4\t{}\ns\t\t{}\n",
        hex(&special),
        hex(&w),
        hex(&[9.0])
    );
    assert_eq!(run(&py, &[Path::new("read"), &path]), want);
    eprintln!("live_round_trips_with_python: both directions bit-exact with {py}");
    std::fs::remove_dir_all(&dir).unwrap();
}
