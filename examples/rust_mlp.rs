//! Trains a two-layer MLP through the Rust API: 2 inputs -> 32 tanh units
//! -> 2 classes, AdamW, on two interleaved half-moons (deterministic data).
//! Prints the loss every 50 steps and the final accuracy; exits with status
//! 1 if the loss does not fall below a quarter of its first value or the
//! accuracy stays under 90%.
//!
//!     cargo run --release --example rust_mlp

use arenagrad::{Context, OptimizerKind};

const N: usize = 200; // points
const H: usize = 32; // hidden units
const STEPS: usize = 400;

/// Two half-moons: class 0 on the upper arc, class 1 on the lower arc
/// shifted right and down, with a small deterministic wobble.
fn data() -> (Vec<f32>, Vec<i32>) {
    let mut x = Vec::with_capacity(2 * N);
    let mut y = Vec::with_capacity(N);
    for i in 0..N {
        let class = (i % 2) as i32;
        let t = std::f32::consts::PI * (i / 2) as f32 / (N / 2) as f32;
        let wobble = 0.05 * ((i * 7919) % 13) as f32 / 13.0;
        let (px, py) = if class == 0 {
            (t.cos(), t.sin() + wobble)
        } else {
            (1.0 - t.cos(), 0.5 - t.sin() - wobble)
        };
        x.extend_from_slice(&[px, py]);
        y.push(class);
    }
    (x, y)
}

/// Small deterministic initial weights in [-scale, scale].
fn init(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (xs, ys) = data();
    let mut ctx = Context::new();
    let w1 = ctx.param(&[2, H], Some(&init(2 * H, 1, 0.7)))?;
    let b1 = ctx.param(&[H], None)?;
    let w2 = ctx.param(&[H, 2], Some(&init(2 * H, 2, 0.2)))?;
    let b2 = ctx.param(&[2], None)?;
    ctx.optimizer(OptimizerKind::AdamW {
        lr: 0.02,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
    })?;

    let (mut first, mut last) = (0.0f32, 0.0f32);
    let mut logits_out = vec![0.0f32; 2 * N];
    for step in 0..STEPS {
        let x = ctx.tensor(&[N, 2], &xs)?;
        let h = ctx.linear(x, w1, Some(b1))?;
        let h = ctx.tanh(h)?;
        let logits = ctx.linear(h, w2, Some(b2))?;
        let loss = ctx.cross_entropy(logits, &ys)?;
        last = ctx.item(loss)?;
        if step == 0 {
            first = last;
        }
        if step % 50 == 0 || step == STEPS - 1 {
            println!("step {step:3} loss {last:.4}");
        }
        if step == STEPS - 1 {
            ctx.read(logits, &mut logits_out)?;
        }
        ctx.backward(loss)?;
        ctx.optimizer_step()?;
        ctx.zero_grad();
        ctx.reset();
    }

    let correct = logits_out
        .chunks_exact(2)
        .zip(&ys)
        .filter(|(l, y)| ((l[1] > l[0]) as i32) == **y)
        .count();
    let accuracy = correct as f32 / N as f32;
    let m = ctx.memory_stats();
    println!(
        "loss {first:.4} -> {last:.4}, accuracy {:.1}%, arena high-water {} bytes",
        100.0 * accuracy,
        m.arena_high_water_bytes
    );
    if !(last < first / 4.0 && accuracy >= 0.9) {
        eprintln!("rust_mlp: the model did not learn");
        std::process::exit(1);
    }
    Ok(())
}
