//! The `safetensors_load` target: a file handed to ag_safetensors_load for
//! the fixed small model of the `checkpoint_load` target (parameters
//! `param.0` .. `param.2`, AdamW after one step).
//!
//! A refused file must leave the parameters and the optimizer state exactly
//! as they were; an accepted one must fill every parameter with bytes of the
//! file's data section, load again to the same values, and survive a save
//! and load round trip bit for bit.

use super::checkpoint_load::{CKPT_SHAPES, Model, SeedOptimizer};
use super::{RUN, last_error, status_name};
use arenagrad::ffi::*;
use std::ffi::CString;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

/// A file name of this process in a RAM-backed folder when there is one
/// (a file per input would otherwise wear the disk).
fn scratch_path(tag: &str) -> PathBuf {
    let shm = std::path::Path::new("/dev/shm");
    let dir = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let run = RUN.fetch_add(1, Ordering::Relaxed);
    dir.join(format!(
        "ag_fuzz_st_{}_{tag}_{run}.safetensors",
        std::process::id()
    ))
}

fn c_path(p: &std::path::Path) -> CString {
    CString::new(p.to_string_lossy().as_bytes()).expect("no NUL in a temporary path")
}

/// Loads `data` from a temporary file into `m`; returns the status.
fn load_bytes(m: &Model, data: &[u8]) -> ag_status {
    let path = scratch_path("in");
    std::fs::write(&path, data).expect("write the input file");
    let st = ag_safetensors_load(m.ctx, c_path(&path).as_ptr());
    let _ = std::fs::remove_file(&path);
    st
}

/// The bytes ag_safetensors_save writes for `m`.
pub fn saved_bytes(m: &Model) -> Vec<u8> {
    let path = scratch_path("out");
    let st = ag_safetensors_save(m.ctx, c_path(&path).as_ptr());
    assert_eq!(st, AG_STATUS_OK, "{}", last_error(m.ctx));
    let bytes = std::fs::read(&path).expect("read the saved file");
    std::fs::remove_file(&path).expect("remove the saved file");
    bytes
}

/// Runs one input; returns the status of its load.
pub fn run_safetensors_load(data: &[u8]) -> ag_status {
    let m = Model::new(&CKPT_SHAPES, SeedOptimizer::AdamW);
    let before = m.values();
    let st = load_bytes(&m, data);
    assert!(
        matches!(
            st,
            AG_STATUS_OK
                | AG_STATUS_CHECKPOINT_CORRUPT
                | AG_STATUS_CHECKPOINT_MISMATCH
                | AG_STATUS_ALLOCATION_FAILED
        ),
        "ag_safetensors_load returned {} ({st}): {}",
        status_name(st),
        last_error(m.ctx)
    );
    if st != AG_STATUS_OK {
        let msg = last_error(m.ctx);
        assert!(
            msg.contains("safetensors"),
            "refusal without a message naming the function: {msg:?}"
        );
        assert!(m.values() == before, "refused file changed the parameters");
        // The optimizer state is untouched too: the next step matches a
        // model that never saw the file.
        let control = Model::new(&CKPT_SHAPES, SeedOptimizer::AdamW);
        assert_eq!(m.train_step(), AG_STATUS_OK, "{}", last_error(m.ctx));
        assert_eq!(control.train_step(), AG_STATUS_OK);
        assert!(
            m.values() == control.values(),
            "refused file changed the optimizer state"
        );
        return st;
    }
    let loaded = m.values();
    // Every parameter's bytes come from the file's data section.
    let header_len = u64::from_le_bytes(data[..8].try_into().expect("8 bytes")) as usize;
    let section = &data[8 + header_len..];
    let mut at = 0;
    for &(_, n) in &m.params {
        let want = &loaded[at..at + n];
        let bytes: Vec<u8> = want.iter().flat_map(|b| b.to_le_bytes()).collect();
        at += n;
        // As float32 bytes, or as float16 or bfloat16 ones converted.
        let halves = |decode: fn(u16) -> u32| {
            section.windows(2 * n).any(|w| {
                w.chunks_exact(2)
                    .map(|b| decode(u16::from_le_bytes([b[0], b[1]])))
                    .eq(want.iter().copied())
            })
        };
        assert!(
            section.windows(bytes.len()).any(|w| w == bytes)
                || halves(f16_bits)
                || halves(|h| u32::from(h) << 16),
            "a loaded parameter is not in the file's data section"
        );
    }
    // Loading again gives the same values.
    assert_eq!(load_bytes(&m, data), AG_STATUS_OK, "{}", last_error(m.ctx));
    assert!(m.values() == loaded, "a second load differs");
    // Save, load into a fresh model: the same bits.
    let again = saved_bytes(&m);
    let fresh = Model::new(&CKPT_SHAPES, SeedOptimizer::AdamW);
    assert_eq!(
        load_bytes(&fresh, &again),
        AG_STATUS_OK,
        "{}",
        last_error(fresh.ctx)
    );
    assert!(fresh.values() == loaded, "save and load changed the values");
    st
}

/// The float32 bits of a binary16 value, from its definition (sign,
/// 2^(e-15) * 1.m, or 2^-14 * 0.m when e is 0); NaNs keep their payload in
/// the mantissa's top bits.
fn f16_bits(h: u16) -> u32 {
    let sign = if h & 0x8000 != 0 { -1.0f64 } else { 1.0 };
    let (e, m) = (i32::from(h >> 10 & 0x1f), f64::from(h & 0x3ff));
    let v = match e {
        0 => sign * m * 2f64.powi(-24),
        31 if m == 0.0 => sign * f64::INFINITY,
        31 => return u32::from(h & 0x8000) << 16 | 0x7f80_0000 | u32::from(h & 0x3ff) << 13,
        _ => sign * (1024.0 + m) * 2f64.powi(e - 25),
    };
    (v as f32).to_bits()
}

/// A safetensors file written by hand: 8-byte header length, the JSON
/// header, the data.
fn handmade(header: &str, data: &[u8]) -> Vec<u8> {
    let mut f = (header.len() as u64).to_le_bytes().to_vec();
    f.extend_from_slice(header.as_bytes());
    f.extend_from_slice(data);
    f
}

/// Seed files for the `safetensors_load` corpus: (file name, bytes).
pub fn safetensors_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let m = Model::new(&CKPT_SHAPES, SeedOptimizer::AdamW);
    let other = Model::new(&[&[4, 3], &[4], &[2, 2, 2]], SeedOptimizer::None);
    // The model's parameters as float16, bfloat16 and float32 (loaded).
    let halves = handmade(
        concat!(
            r#"{"param.0":{"dtype":"F16","shape":[4,3],"data_offsets":[0,24]},"#,
            r#""param.1":{"dtype":"BF16","shape":[3],"data_offsets":[24,30]},"#,
            r#""param.2":{"dtype":"F32","shape":[2,2,2],"data_offsets":[30,62]}}"#
        ),
        &(0..62u8).map(|b| b.wrapping_mul(37)).collect::<Vec<u8>>(),
    );
    // A dtype that is not converted (refused).
    let i16 = handmade(
        r#"{"param.0":{"dtype":"I16","shape":[4,3],"data_offsets":[0,24]}}"#,
        &[0u8; 24],
    );
    let with_metadata = handmade(
        concat!(
            r#"{"__metadata__":{"format":"pt"},"#,
            r#""param.1":{"dtype":"F32","shape":[3],"data_offsets":[48,60]},"#,
            r#""param.0":{"dtype":"F32","shape":[4,3],"data_offsets":[0,48]},"#,
            r#""param.2":{"dtype":"F32","shape":[2,2,2],"data_offsets":[60,92]}}"#
        ),
        &(0..92u8).collect::<Vec<u8>>(),
    );
    vec![
        ("seed_saved", saved_bytes(&m)),
        ("seed_other_shape", saved_bytes(&other)),
        ("seed_f16", halves),
        ("seed_i16", i16),
        ("seed_metadata_unsorted", with_metadata),
    ]
}
