//! A posterior's gradient loop makes no system allocation and keeps its
//! memory flat: the eight-schools (non-centred) log density through the C
//! API, as an MCMC sampler calls it (write the position into a parameter,
//! zero the gradient, build log p, backward, read the gradient, reset).
//!
//! A counting `#[global_allocator]` (the same scheme as
//! arena_steady_state.rs; no libtest harness, whose threads allocate)
//! counts allocator calls on every thread over AG_POSTERIOR_EVALS
//! evaluations (default 20,000; `make nuts-long` runs 1,000,000) after 2,000
//! of warm-up, and the arena, tape and table figures and the RSS must not
//! move. Each gradient is also checked against the float64 analytic one
//! at a few positions (relative 1e-4: float32 sums of eight terms).

mod common;

use arenagrad::MemoryStats;
use arenagrad::ffi::*;
use common::counting_alloc::{CountingAlloc, calls, count};
use common::ffi::ok;

#[global_allocator]
static GLOBAL: CountingAlloc = CountingAlloc;

const Y: [f32; 8] = [28.0, 8.0, -3.0, 7.0, -1.0, 1.0, 18.0, 12.0];
const SIGMA: [f32; 8] = [15.0, 10.0, 16.0, 11.0, 9.0, 11.0, 10.0, 18.0];

struct Posterior {
    ctx: *mut ag_context,
    q: ag_tensor,
}

fn blank() -> ag_tensor {
    ag_tensor {
        index: 0,
        context: 0,
        generation: 0,
    }
}

impl Posterior {
    fn new() -> Self {
        let mut ctx: *mut ag_context = std::ptr::null_mut();
        ok(ag_context_new(&mut ctx), "ag_context_new");
        let mut q = blank();
        ok(
            ag_param_new(ctx, [10usize].as_ptr(), 1, std::ptr::null(), &mut q),
            "ag_param_new",
        );
        Posterior { ctx, q }
    }

    /// log p(q) and its gradient: q = (theta_trans[8], mu, log tau).
    fn logp_grad(&self, q: &[f32; 10], g: &mut [f32; 10]) -> f32 {
        let c = self.ctx;
        let mut t = [blank(); 24];
        ok(ag_param_write(c, self.q, q.as_ptr(), 10), "ag_param_write");
        ok(ag_zero_grad(c), "ag_zero_grad");
        let one = 1.0f32;
        ok(
            ag_tensor_new(c, [1usize].as_ptr(), 1, &one, &mut t[0]),
            "ag_tensor_new",
        );
        ok(
            ag_tensor_new(c, [8usize].as_ptr(), 1, Y.as_ptr(), &mut t[1]),
            "ag_tensor_new",
        );
        ok(
            ag_tensor_new(c, [8usize].as_ptr(), 1, SIGMA.as_ptr(), &mut t[2]),
            "ag_tensor_new",
        );
        ok(ag_slice(c, self.q, 0, 0, 8, &mut t[3]), "ag_slice");
        ok(ag_slice(c, self.q, 0, 8, 1, &mut t[4]), "ag_slice");
        ok(ag_slice(c, self.q, 0, 9, 1, &mut t[5]), "ag_slice");
        ok(ag_exp(c, t[5], &mut t[6]), "ag_exp"); // tau
        ok(ag_mul(c, t[3], t[6], &mut t[7]), "ag_mul");
        ok(ag_add(c, t[7], t[4], &mut t[8]), "ag_add"); // theta
        ok(ag_sub(c, t[1], t[8], &mut t[9]), "ag_sub");
        ok(ag_div(c, t[9], t[2], &mut t[10]), "ag_div"); // z
        ok(ag_mul(c, t[10], t[10], &mut t[11]), "ag_mul");
        ok(ag_mul(c, t[3], t[3], &mut t[12]), "ag_mul");
        ok(ag_add(c, t[11], t[12], &mut t[13]), "ag_add");
        ok(ag_sum(c, t[13], &mut t[14]), "ag_sum");
        ok(ag_scale(c, t[14], -0.5, &mut t[15]), "ag_scale");
        ok(ag_mul(c, t[4], t[4], &mut t[16]), "ag_mul");
        ok(ag_scale(c, t[16], -1.0 / 50.0, &mut t[17]), "ag_scale"); // mu ~ normal(0, 5)
        ok(ag_mul(c, t[6], t[6], &mut t[18]), "ag_mul");
        ok(ag_scale(c, t[18], 1.0 / 25.0, &mut t[19]), "ag_scale");
        ok(ag_add(c, t[19], t[0], &mut t[20]), "ag_add");
        ok(ag_log(c, t[20], &mut t[21]), "ag_log"); // tau ~ cauchy(0, 5)
        ok(ag_sub(c, t[15], t[21], &mut t[22]), "ag_sub");
        ok(ag_add(c, t[22], t[17], &mut t[23]), "ag_add");
        ok(ag_add(c, t[23], t[5], &mut t[0]), "ag_add"); // + log tau (Jacobian)
        let mut lp = 0.0f32;
        ok(ag_tensor_item(c, t[0], &mut lp), "ag_tensor_item");
        ok(ag_backward(c, t[0]), "ag_backward");
        ok(
            ag_tensor_read_grad(c, self.q, g.as_mut_ptr(), 10),
            "ag_tensor_read_grad",
        );
        ok(ag_reset(c), "ag_reset");
        lp
    }

    fn figures(&self) -> MemoryStats {
        let mut s = MemoryStats::default();
        ok(ag_memory_stats(self.ctx, &mut s), "ag_memory_stats");
        s
    }
}

impl Drop for Posterior {
    fn drop(&mut self) {
        ok(ag_context_free(&mut self.ctx), "ag_context_free");
    }
}

/// The float64 gradient of the same density.
fn grad_f64(q: &[f32; 10]) -> [f64; 10] {
    let (mu, lt) = (q[8] as f64, q[9] as f64);
    let tau = lt.exp();
    let mut g = [0.0; 10];
    for j in 0..8 {
        let tt = q[j] as f64;
        let z = (Y[j] as f64 - mu - tau * tt) / SIGMA[j] as f64;
        let dz = z / SIGMA[j] as f64; // d(-z^2/2)/d theta
        g[j] = -tt + dz * tau;
        g[8] += dz;
        g[9] += dz * tau * tt;
    }
    g[8] -= mu / 25.0;
    g[9] += -2.0 * tau * tau / 25.0 / (1.0 + tau * tau / 25.0) + 1.0;
    g
}

/// Deterministic positions.
fn position(i: u64) -> [f32; 10] {
    let mut q = [0.0f32; 10];
    let mut x = i.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for v in q.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *v = ((x >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 3.0;
    }
    q
}

fn main() {
    let evals: u64 = std::env::var("AG_POSTERIOR_EVALS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_000);
    let p = Posterior::new();
    let mut g = [0.0f32; 10];
    for i in 0..2_000 {
        p.logp_grad(&position(i), &mut g);
        if i % 400 == 0 {
            let want = grad_f64(&position(i));
            for k in 0..10 {
                let tol = 1e-4 * want[k].abs().max(1.0);
                assert!(
                    (g[k] as f64 - want[k]).abs() <= tol,
                    "gradient {k}: {} vs {}",
                    g[k],
                    want[k]
                );
            }
        }
    }
    let (f0, rss0) = (p.figures(), common::rss_kib());
    let before = calls();
    count(true);
    let mut sum = 0.0f64;
    for i in 0..evals {
        sum += p.logp_grad(&position(2_000 + i % 10_000), &mut g) as f64;
    }
    count(false);
    let calls = calls() - before;
    let (f1, rss1) = (p.figures(), common::rss_kib());
    eprintln!(
        "posterior_steady_state: {evals} eight-schools gradients: {calls} allocator calls; RSS {rss0} -> {rss1} KiB; \
         arena reserved {} -> {}, high water {} -> {}, tape capacity {} -> {}, table capacity {} -> {} (sum {sum:.3e})",
        f0.arena_reserved_bytes,
        f1.arena_reserved_bytes,
        f0.arena_high_water_bytes,
        f1.arena_high_water_bytes,
        f0.tape_capacity,
        f1.tape_capacity,
        f0.table_capacity,
        f1.table_capacity
    );
    assert_eq!(calls, 0, "allocator calls in the steady state");
    assert_eq!(f0.arena_reserved_bytes, f1.arena_reserved_bytes);
    assert_eq!(f0.arena_high_water_bytes, f1.arena_high_water_bytes);
    assert_eq!(f0.tape_capacity, f1.tape_capacity);
    assert_eq!(f0.table_capacity, f1.table_capacity);
    // Pages the allocator did not ask for cannot appear; 256 KiB allows for
    // the stack and lazily touched library pages.
    assert!(rss1 <= rss0 + 256, "RSS grew from {rss0} to {rss1} KiB");
    eprintln!("posterior_steady_state: ok");
}
