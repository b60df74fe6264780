//! The `checkpoint_load` target: a checkpoint file, loaded with
//! ag_checkpoint_load_bytes into a fixed small model with AdamW.

use super::{RUN, SENTINEL, last_error, status_name};
use arenagrad::ffi::*;
use std::ffi::CString;
use std::ptr::null_mut;
use std::sync::OnceLock;
use std::sync::atomic::Ordering;

/// Shapes of the fixed model of the `checkpoint_load` target.
pub const CKPT_SHAPES: [&[usize]; 3] = [&[4, 3], &[3], &[2, 2, 2]];
/// Capacity of the user-bytes buffer given to ag_checkpoint_load_bytes.
pub const CKPT_USER_CAP: usize = 16;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum SeedOptimizer {
    None,
    AdamW,
    Sgd,
}

/// A small model through the C API: parameters with deterministic values,
/// an optimizer, and (with an optimizer) one training step so the moments
/// are non-zero.
pub struct Model {
    pub ctx: *mut ag_context,
    pub params: Vec<(ag_tensor, usize)>,
}

impl Model {
    pub fn new(shapes: &[&[usize]], opt: SeedOptimizer) -> Model {
        let mut ctx = null_mut();
        assert_eq!(ag_context_new(&mut ctx), AG_STATUS_OK);
        let mut params = Vec::new();
        for (k, s) in shapes.iter().enumerate() {
            let n: usize = s.iter().product();
            let init: Vec<f32> = (0..n)
                .map(|i| ((i * 5 + k * 3) % 11) as f32 * 0.1 - 0.5)
                .collect();
            let mut t = SENTINEL;
            assert_eq!(
                ag_param_new(ctx, s.as_ptr(), s.len(), init.as_ptr(), &mut t),
                AG_STATUS_OK
            );
            params.push((t, n));
        }
        let st = match opt {
            SeedOptimizer::None => AG_STATUS_OK,
            SeedOptimizer::AdamW => ag_optimizer_adamw(ctx, 1e-2, 0.9, 0.999, 1e-8, 0.01),
            SeedOptimizer::Sgd => ag_optimizer_sgd(ctx, 1e-2, 0.9, 0.0),
        };
        assert_eq!(st, AG_STATUS_OK);
        let m = Model { ctx, params };
        if opt != SeedOptimizer::None {
            assert_eq!(m.train_step(), AG_STATUS_OK);
        }
        m
    }

    /// loss = sum over parameters of sum(p * p * c); backward; step.
    /// Returns the first failing status, or OK.
    pub fn train_step(&self) -> ag_status {
        let c = self.ctx;
        let r = ag_reset(c);
        if r != AG_STATUS_OK {
            return r;
        }
        let mut total: Option<ag_tensor> = None;
        for &(p, _) in &self.params {
            let mut sq = SENTINEL;
            let mut s = SENTINEL;
            let st = ag_mul(c, p, p, &mut sq);
            if st != AG_STATUS_OK {
                return st;
            }
            let st = ag_sum(c, sq, &mut s);
            if st != AG_STATUS_OK {
                return st;
            }
            total = Some(match total {
                None => s,
                Some(t) => {
                    let mut o = SENTINEL;
                    let st = ag_add(c, t, s, &mut o);
                    if st != AG_STATUS_OK {
                        return st;
                    }
                    o
                }
            });
        }
        let loss = total.expect("a parameter");
        let st = ag_backward(c, loss);
        if st != AG_STATUS_OK {
            return st;
        }
        let st = ag_optimizer_step(c);
        if st != AG_STATUS_OK {
            return st;
        }
        ag_zero_grad(c)
    }

    pub fn values(&self) -> Vec<u32> {
        let mut all = Vec::new();
        for &(p, n) in &self.params {
            let mut v = vec![0.0f32; n];
            assert_eq!(ag_tensor_read(self.ctx, p, v.as_mut_ptr(), n), AG_STATUS_OK);
            all.extend(v.iter().map(|x| x.to_bits()));
        }
        all
    }

    /// The checkpoint of this model through ag_checkpoint_save (to a
    /// temporary file that is removed again).
    pub fn checkpoint(&self, user: &[u8]) -> Vec<u8> {
        let run = RUN.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("ag_fuzz_seed_{}_{run}.ckpt", std::process::id()));
        let p = CString::new(path.to_string_lossy().as_bytes()).unwrap();
        let st = ag_checkpoint_save(self.ctx, p.as_ptr(), user.as_ptr(), user.len());
        assert_eq!(st, AG_STATUS_OK, "{}", last_error(self.ctx));
        let bytes = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        bytes
    }
}

impl Drop for Model {
    fn drop(&mut self) {
        assert_eq!(ag_context_free(&mut self.ctx), AG_STATUS_OK);
    }
}

/// Parameters of the fixed model after creation plus one more training step
/// (the control for a refused load).
fn control_after_step() -> &'static [u32] {
    static C: OnceLock<Vec<u32>> = OnceLock::new();
    C.get_or_init(|| {
        let m = Model::new(&CKPT_SHAPES, SeedOptimizer::AdamW);
        assert_eq!(m.train_step(), AG_STATUS_OK);
        m.values()
    })
}

/// CRC-32 (IEEE, reflected, as the checkpoint format uses), bitwise.
pub fn crc32(data: &[u8]) -> u32 {
    let mut c = !0u32;
    for &b in data {
        c ^= b as u32;
        for _ in 0..8 {
            c = if c & 1 == 1 {
                (c >> 1) ^ 0xEDB8_8320
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// Runs one `checkpoint_load` input twice: as it is, and with its last four
/// bytes replaced by the CRC of the rest (so mutations get past the CRC
/// check to the structural validation behind it). Returns the status of
/// the load of the unmodified bytes.
pub fn run_checkpoint_load(data: &[u8]) -> ag_status {
    let st = load_one(data);
    if data.len() >= 12 {
        let mut fixed = data.to_vec();
        let body = fixed.len() - 4;
        let crc = crc32(&fixed[..body]);
        fixed[body..].copy_from_slice(&crc.to_le_bytes());
        if fixed != data {
            load_one(&fixed);
        }
    }
    st
}

fn load_one(data: &[u8]) -> ag_status {
    let control = control_after_step();
    let m = Model::new(&CKPT_SHAPES, SeedOptimizer::AdamW);
    let before = m.values();
    let mut user = [0xEEu8; CKPT_USER_CAP + 8];
    let mut ulen = 999usize;
    let st = ag_checkpoint_load_bytes(
        m.ctx,
        data.as_ptr(),
        data.len(),
        user.as_mut_ptr(),
        CKPT_USER_CAP,
        &mut ulen,
    );
    assert!(
        matches!(
            st,
            AG_STATUS_OK
                | AG_STATUS_CHECKPOINT_CORRUPT
                | AG_STATUS_CHECKPOINT_MISMATCH
                | AG_STATUS_INVALID_ARGUMENT
        ),
        "ag_checkpoint_load_bytes returned {} ({st}): {}",
        status_name(st),
        last_error(m.ctx)
    );
    assert!(
        user[CKPT_USER_CAP..].iter().all(|&b| b == 0xEE),
        "user bytes written past the capacity"
    );
    if st != AG_STATUS_OK {
        assert!(!last_error(m.ctx).is_empty(), "failure without a message");
        assert_eq!(ulen, 999, "user_len written on failure");
        assert!(
            user.iter().all(|&b| b == 0xEE),
            "user bytes written on failure"
        );
        assert!(
            m.values() == before,
            "refused checkpoint changed the parameters"
        );
        // Optimizer state and step count untouched too: the next step gives
        // exactly the control's parameters.
        assert_eq!(m.train_step(), AG_STATUS_OK, "{}", last_error(m.ctx));
        assert!(
            m.values() == control,
            "refused checkpoint changed the optimizer state"
        );
        return st;
    }
    assert!(ulen <= CKPT_USER_CAP);
    assert!(data.len() >= 4 + ulen);
    assert_eq!(&user[..ulen], &data[data.len() - 4 - ulen..data.len() - 4]);
    let loaded = m.values();
    // Loading the same bytes again is idempotent.
    let mut ulen2 = 0usize;
    let st2 = ag_checkpoint_load_bytes(
        m.ctx,
        data.as_ptr(),
        data.len(),
        user.as_mut_ptr(),
        CKPT_USER_CAP,
        &mut ulen2,
    );
    assert_eq!(st2, AG_STATUS_OK);
    assert_eq!(ulen2, ulen);
    assert!(m.values() == loaded);
    // The context keeps working (the loaded values may be non-finite).
    let st3 = m.train_step();
    assert!(
        matches!(st3, AG_STATUS_OK | AG_STATUS_NON_FINITE),
        "training after a load: {} {}",
        status_name(st3),
        last_error(m.ctx)
    );
    st
}

/// Seed checkpoints for the `checkpoint_load` corpus: (file name, bytes).
pub fn checkpoint_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let adamw = Model::new(&CKPT_SHAPES, SeedOptimizer::AdamW);
    let sgd = Model::new(&CKPT_SHAPES, SeedOptimizer::Sgd);
    let plain = Model::new(&CKPT_SHAPES, SeedOptimizer::None);
    let other = Model::new(&[&[4, 3], &[4], &[2, 2, 2]], SeedOptimizer::AdamW);
    vec![
        ("seed_adamw_user", adamw.checkpoint(b"user-16-bytes!!!")),
        ("seed_adamw", adamw.checkpoint(&[])),
        ("seed_adamw_big_user", adamw.checkpoint(&[7u8; 40])),
        ("seed_sgd", sgd.checkpoint(b"sgd")),
        ("seed_no_optimizer", plain.checkpoint(b"p")),
        ("seed_other_shape", other.checkpoint(&[])),
    ]
}
