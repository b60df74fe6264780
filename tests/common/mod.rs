//! Helpers shared by the integration tests: each test file that needs them
//! declares `mod common;` and uses the parts it needs.
#![allow(dead_code)]

pub mod counting_alloc;
pub mod ffi;
pub mod gpt;
pub mod null_context;
pub mod text;

/// Every parameter's values (or gradients, with `grad`) as bits, parameter
/// after parameter: what the bit-for-bit comparisons compare.
pub fn param_bits(ctx: &arenagrad::Context, grad: bool) -> Vec<u32> {
    let mut out = Vec::new();
    for p in ctx.params().collect::<Vec<_>>() {
        let mut v = vec![0.0; ctx.numel(p).unwrap()];
        if grad {
            ctx.read_grad(p, &mut v).unwrap();
        } else {
            ctx.read(p, &mut v).unwrap();
        }
        out.extend(v.iter().map(|x| x.to_bits()));
    }
    out
}

/// This process's resident set in KiB (/proc/self/statm's second field, in
/// 4 KiB pages); 0 where it cannot be read.
pub fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    s.split_whitespace()
        .nth(1)
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
        * 4
}

/// A Python that has the `safetensors` and `numpy` packages (AG_PYTHON,
/// else python3), if any: the safetensors tests' live checks need one.
pub fn safetensors_python() -> Option<String> {
    let py = std::env::var("AG_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = std::process::Command::new(&py)
        .args(["-c", "import safetensors.numpy, numpy"])
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(py)
}

/// Sets AdamW with this learning rate and weight decay, and the usual
/// betas (0.9, 0.999) and eps (1e-8).
pub fn adamw(ctx: &mut arenagrad::Context, lr: f32, weight_decay: f32) {
    ctx.optimizer(arenagrad::OptimizerKind::AdamW {
        lr,
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay,
    })
    .unwrap();
}
