//! Checkpoint torture, driven by scripts/torture.sh: damaged checkpoints are
//! refused and leave the model alone; a save that is killed, runs out of
//! disk or cannot write leaves a complete checkpoint behind.
//!
//! ```text
//! ckpt_torture corrupt [FLIPS]      every truncation offset and FLIPS (10,000)
//!                                   random single-bit flips of a tiny-GPT
//!                                   checkpoint: all CHECKPOINT_CORRUPT, the
//!                                   model untouched; other shapes: MISMATCH
//! ckpt_torture kill DIR [TRIALS]    TRIALS (200) times: a child process saves
//!                                   in a loop to DIR/m.ckpt and is killed
//!                                   (SIGKILL) after a random delay; the file
//!                                   must load and be one consistent save
//! ckpt_torture diskfull DIR [--rlimit]
//!                                   DIR is a small (64 KiB) tmpfs: a small
//!                                   checkpoint fits, a big one gets IO, no
//!                                   temporary file stays, the small one is
//!                                   intact. With --rlimit, RLIMIT_FSIZE plays
//!                                   the full disk instead (EFBIG).
//! ckpt_torture readonly DIR         DIR holds m.ckpt from `diskfull` and is
//!                                   now mounted read-only: IO, file intact
//! ckpt_torture unwritable DIR       a path under a regular file and one in a
//!                                   missing folder: IO, nothing left behind
//! ```
//! Every mode prints one `torture <mode>: ...` line with its counts and exits
//! non-zero on the first broken guarantee.

// The GPT model lives with the tests (it is not part of the library).
#[allow(dead_code)]
#[path = "../tests/common/gpt.rs"]
mod gpt;

use arenagrad::ffi::{AG_STATUS_CHECKPOINT_CORRUPT, AG_STATUS_CHECKPOINT_MISMATCH, AG_STATUS_IO};
use arenagrad::{Context, Error};
use gpt::{Gpt, GptConfig, Rng};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

type Res<T> = Result<T, String>;

fn cfg() -> GptConfig {
    GptConfig::tiny(16)
}

/// A tiny GPT with AdamW after one training step (non-zero moments).
fn tiny_model(seed: u64) -> (Context, Gpt) {
    let mut ctx = Context::new();
    let gpt = Gpt::new(&mut ctx, cfg(), seed).expect("model");
    Gpt::adamw(&mut ctx, 1e-3).expect("adamw");
    step(&mut ctx, &gpt, 0);
    (ctx, gpt)
}

fn step(ctx: &mut Context, gpt: &Gpt, i: u64) -> f32 {
    let c = cfg();
    let mut rng = Rng(77 + i);
    let n = c.tokens();
    let seq: Vec<i32> = (0..=n).map(|_| rng.below(c.vocab_size) as i32).collect();
    gpt.train_step(ctx, &seq[..n], &seq[1..])
        .expect("train step")
}

/// Every parameter value, bit for bit.
fn values(ctx: &Context) -> Vec<u32> {
    let mut all = Vec::new();
    for p in ctx.params() {
        let mut v = vec![0.0; ctx.shape(p).unwrap().numel()];
        ctx.read(p, &mut v).unwrap();
        all.extend(v.iter().map(|x| x.to_bits()));
    }
    all
}

fn corrupt(flips: usize) -> Res<()> {
    let t0 = Instant::now();
    let (mut src, _) = tiny_model(1);
    let bytes = src
        .checkpoint_bytes(b"torture-user-bytes")
        .map_err(|e| e.to_string())?;
    // The victim: a different model (seed 2) that must never change, and
    // its twin that never sees a load (the control for the next step).
    let (mut dst, gpt) = tiny_model(2);
    let (mut twin, twin_gpt) = tiny_model(2);
    let before = values(&dst);
    let expect_corrupt = |what: &str, r: Result<&[u8], Error>| -> Res<()> {
        match r {
            Err(e) if e.status() == AG_STATUS_CHECKPOINT_CORRUPT => Ok(()),
            Err(e) => Err(format!("{what}: {e} (expected CHECKPOINT_CORRUPT)")),
            Ok(_) => Err(format!("{what}: loaded")),
        }
    };
    let t1 = Instant::now();
    let mut refused = 0usize;
    for cut in 0..bytes.len() {
        expect_corrupt(
            &format!("truncated at {cut}"),
            dst.checkpoint_load_bytes(&bytes[..cut]),
        )?;
        refused += 1;
    }
    let trunc_secs = t1.elapsed().as_secs_f64();
    let mut rng = Rng(0xC0FFEE);
    let mut buf = bytes.clone();
    for i in 0..flips {
        let bit = rng.below(bytes.len() * 8);
        buf[bit / 8] ^= 1 << (bit % 8);
        expect_corrupt(
            &format!("flip {i} (bit {bit})"),
            dst.checkpoint_load_bytes(&buf),
        )?;
        buf[bit / 8] ^= 1 << (bit % 8);
    }
    if values(&dst) != before {
        return Err("refused checkpoints changed the parameters".into());
    }
    // Optimizer state and step untouched too: the next step matches the twin.
    let a = step(&mut dst, &gpt, 5);
    let b = step(&mut twin, &twin_gpt, 5);
    if a.to_bits() != b.to_bits() {
        return Err(format!("step after refused loads: {a} vs control {b}"));
    }
    // Other model shapes: CHECKPOINT_MISMATCH, nothing changed.
    let before = values(&dst);
    let shapes = [
        GptConfig {
            vocab_size: 17,
            ..cfg()
        },
        GptConfig {
            n_embd: 16,
            ..cfg()
        },
        GptConfig {
            n_layer: 2,
            ..cfg()
        },
        GptConfig {
            block_size: 16,
            ..cfg()
        },
    ];
    for c in shapes {
        let mut other = Context::new();
        Gpt::new(&mut other, c, 3).unwrap();
        Gpt::adamw(&mut other, 1e-3).unwrap();
        let b = other.checkpoint_bytes(&[]).unwrap();
        match dst.checkpoint_load_bytes(&b) {
            Err(e) if e.status() == AG_STATUS_CHECKPOINT_MISMATCH => {}
            r => {
                return Err(format!(
                    "{c:?}: {:?} (expected CHECKPOINT_MISMATCH)",
                    r.err()
                ));
            }
        }
    }
    if values(&dst) != before {
        return Err("mismatched checkpoints changed the parameters".into());
    }
    // And the intact file loads, bit-exact.
    let user = dst
        .checkpoint_load_bytes(&bytes)
        .map_err(|e| e.to_string())?;
    if user != b"torture-user-bytes" || values(&dst) != values(&src) {
        return Err("intact checkpoint did not round-trip".into());
    }
    println!(
        "torture corrupt: {} bytes, {refused} truncations ({trunc_secs:.2}s) and {flips} bit flips refused (CHECKPOINT_CORRUPT), {} shape variants refused (CHECKPOINT_MISMATCH), parameters unchanged, next step bit-exact, {:.1}s",
        bytes.len(),
        shapes.len(),
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

// ---- kill -9 during saves --------------------------------------------------

/// The values the saver writes into the first parameter for save `tag`.
fn tagged(n: usize, tag: u64) -> Vec<f32> {
    (0..n).map(|j| tag as f32 + j as f32 * 1e-3).collect()
}

/// Child: saves to `path` forever, each save tagged (trial << 20 | i) in
/// both the user bytes and the first parameter.
fn saver(path: &Path, trial: u64) -> ! {
    let (mut ctx, _) = tiny_model(1);
    let p0 = ctx.params().next().unwrap();
    let n = ctx.shape(p0).unwrap().numel();
    for i in 1u64.. {
        let tag = (trial << 20) | i;
        ctx.param_write(p0, &tagged(n, tag)).unwrap();
        ctx.checkpoint_save(path, &tag.to_le_bytes()).unwrap();
    }
    unreachable!()
}

/// Loads `path` and checks it is one consistent save; returns its tag.
fn verify(path: &Path) -> Res<u64> {
    let (mut ctx, _) = tiny_model(9);
    let user = ctx
        .checkpoint_load(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let tag = u64::from_le_bytes(user.as_slice().try_into().map_err(|_| "user bytes")?);
    let p0 = ctx.params().next().unwrap();
    let mut v = vec![0.0; ctx.shape(p0).unwrap().numel()];
    ctx.read(p0, &mut v).unwrap();
    if v != tagged(v.len(), tag) {
        return Err(format!(
            "tag {tag:#x}: parameters are not those of that save"
        ));
    }
    Ok(tag)
}

fn kill(dir: &Path, trials: u64) -> Res<()> {
    let t0 = Instant::now();
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let path = dir.join("m.ckpt");
    // The previous checkpoint every trial starts from.
    let (mut ctx, _) = tiny_model(1);
    let p0 = ctx.params().next().unwrap();
    let n = ctx.shape(p0).unwrap().numel();
    ctx.param_write(p0, &tagged(n, 0)).unwrap();
    ctx.checkpoint_save(&path, &0u64.to_le_bytes())
        .map_err(|e| e.to_string())?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut rng = Rng(0x5EED);
    let (mut mid_save, mut advanced, mut saves) = (0, 0, 0u64);
    let mut last_tag = 0u64;
    for trial in 1..=trials {
        let mut child = Command::new(&exe)
            .arg("saver")
            .arg(&path)
            .arg(trial.to_string())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| e.to_string())?;
        let delay = 5 + rng.below(120) as u64;
        std::thread::sleep(Duration::from_millis(delay));
        child.kill().map_err(|e| e.to_string())?; // SIGKILL
        let status = child.wait().map_err(|e| e.to_string())?;
        if status.success() {
            return Err(format!(
                "trial {trial}: the saver exited by itself ({status})"
            ));
        }
        let tag = verify(&path).map_err(|e| format!("trial {trial}: {e}"))?;
        if tag >> 20 == trial {
            advanced += 1;
            saves += tag & 0xFFFFF;
        } else if tag != last_tag {
            return Err(format!(
                "trial {trial}: file holds save {tag:#x}, neither this trial's nor the previous one ({last_tag:#x})"
            ));
        }
        last_tag = tag;
        let tmps: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| e.to_string())?
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().contains(".tmp."))
            .collect();
        if tmps.len() > 1 {
            return Err(format!(
                "trial {trial}: {} temporary files: {tmps:?}",
                tmps.len()
            ));
        }
        for t in &tmps {
            let want = format!("m.ckpt.tmp.{}", child.id());
            if !t.file_name().unwrap().to_string_lossy().starts_with(&want) {
                return Err(format!("trial {trial}: unexpected temporary file {t:?}"));
            }
            mid_save += 1;
            std::fs::remove_file(t).map_err(|e| e.to_string())?;
        }
    }
    println!(
        "torture kill: {trials} SIGKILLs during a save loop: {trials}/{trials} files loaded and validated, {mid_save} kills left a temporary file (killed mid-save, removed), {advanced} trials had published new saves ({saves} saves in all), {:.1}s",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

// ---- disk full, read-only, unwritable ----------------------------------------

/// A model small enough to fit in a 64 KiB tmpfs.
fn small_model() -> Context {
    let mut ctx = Context::new();
    let v: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5).collect();
    ctx.param(&[1000], Some(&v)).unwrap();
    ctx.param(&[10, 10], None).unwrap();
    ctx
}

fn tmp_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(".tmp."))
                .collect()
        })
        .unwrap_or_default()
}

fn expect_io(what: &str, r: arenagrad::Result<()>) -> Res<String> {
    match r {
        Err(e) if e.status() == AG_STATUS_IO => Ok(e.to_string()),
        Err(e) => Err(format!("{what}: {e} (expected IO)")),
        Ok(()) => Err(format!("{what}: saved")),
    }
}

fn small_intact(path: &Path) -> Res<()> {
    let mut c = small_model();
    let want = values(&c);
    let p0 = c.params().next().unwrap();
    c.param_write(p0, &[0.0; 1000]).unwrap();
    c.checkpoint_load(path)
        .map_err(|e| format!("earlier checkpoint: {e}"))?;
    if values(&c) != want {
        return Err("earlier checkpoint changed".into());
    }
    Ok(())
}

fn diskfull(dir: &Path, rlimit: bool) -> Res<()> {
    let path = dir.join("m.ckpt");
    let mut small = small_model();
    small
        .checkpoint_save(&path, b"small")
        .map_err(|e| format!("small checkpoint: {e}"))?;
    let (mut big, _) = tiny_model(1);
    let size = big.checkpoint_bytes(&[]).unwrap().len();
    if rlimit {
        // SAFETY: plain libc calls on this process; SIGXFSZ is ignored so an
        // oversized write fails with EFBIG instead of killing the process.
        unsafe {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            let lim = libc::rlimit {
                rlim_cur: 64 << 10,
                rlim_max: libc::RLIM_INFINITY,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &lim) != 0 {
                return Err("setrlimit failed".into());
            }
        }
    }
    let msg = expect_io(
        "big checkpoint on a full disk",
        big.checkpoint_save(&path, &[]),
    )?;
    let left = tmp_files(dir);
    if !left.is_empty() {
        return Err(format!("temporary files left: {left:?}"));
    }
    small_intact(&path)?;
    println!(
        "torture diskfull: {size}-byte checkpoint into {}: IO ({msg}); no temporary file left; earlier checkpoint intact",
        if rlimit {
            "a 64 KiB RLIMIT_FSIZE"
        } else {
            "a 64 KiB tmpfs"
        }
    );
    Ok(())
}

fn readonly(dir: &Path) -> Res<()> {
    let path = dir.join("m.ckpt");
    let mut small = small_model();
    let msg = expect_io(
        "save into a read-only mount",
        small.checkpoint_save(&path, b"x"),
    )?;
    let left = tmp_files(dir);
    if !left.is_empty() {
        return Err(format!("temporary files left: {left:?}"));
    }
    small_intact(&path)?;
    println!("torture readonly: IO ({msg}); earlier checkpoint intact");
    Ok(())
}

fn unwritable(dir: &Path) -> Res<()> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let file = dir.join("file");
    std::fs::write(&file, b"a regular file").map_err(|e| e.to_string())?;
    let mut small = small_model();
    let a = expect_io(
        "path under a regular file",
        small.checkpoint_save(&file.join("m.ckpt"), &[]),
    )?;
    let b = expect_io(
        "missing folder",
        small.checkpoint_save(&dir.join("missing").join("m.ckpt"), &[]),
    )?;
    let c = expect_io("path is a folder", small.checkpoint_save(dir, &[]))?;
    let left = tmp_files(dir);
    if !left.is_empty() {
        return Err(format!("temporary files left: {left:?}"));
    }
    if std::fs::read(&file).map_err(|e| e.to_string())? != b"a regular file" {
        return Err("the regular file changed".into());
    }
    println!("torture unwritable: 3/3 IO ({a}; {b}; {c}); nothing left behind");
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize| args.get(i).cloned().unwrap_or_default();
    let r = match arg(0).as_str() {
        "corrupt" => corrupt(arg(1).parse().unwrap_or(10_000)),
        "saver" => saver(Path::new(&arg(1)), arg(2).parse().expect("trial")),
        "kill" => kill(Path::new(&arg(1)), arg(2).parse().unwrap_or(200)),
        "diskfull" => diskfull(Path::new(&arg(1)), arg(2) == "--rlimit"),
        "readonly" => readonly(Path::new(&arg(1))),
        "unwritable" => unwritable(Path::new(&arg(1))),
        _ => Err("usage: ckpt_torture corrupt|kill|diskfull|readonly|unwritable ...".into()),
    };
    if let Err(e) = r {
        eprintln!("torture {}: FAILED: {e}", arg(0));
        std::process::exit(1);
    }
}
