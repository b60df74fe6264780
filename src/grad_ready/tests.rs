//! The gradient-ready callback: ranges cover the block exactly once, each
//! holds its final values when reported, some are reported while backward
//! still runs, with views, shared weights, unused parameters, recomputed
//! segments and gradient accumulation.

use super::GradEvent;
use crate::{Context, RecomputePolicy, Tensor};
use std::sync::{Arc, Mutex};

/// What one backward reported: (first, values at report time, ticks seen
/// before it) per range, and the total number of ticks.
#[derive(Default)]
struct Log {
    ranges: Vec<(usize, Vec<f32>, usize)>,
    ticks: usize,
}

fn listen(c: &mut Context, bucket_bytes: usize) -> Arc<Mutex<Log>> {
    let log = Arc::new(Mutex::new(Log::default()));
    let l = log.clone();
    c.set_grad_ready(
        bucket_bytes,
        Some(Box::new(move |e: GradEvent<'_>| {
            let mut l = l.lock().unwrap();
            match e {
                GradEvent::Ready { first, grads } => {
                    let ticks = l.ticks;
                    l.ranges.push((first, grads.to_vec(), ticks));
                }
                GradEvent::Tick => l.ticks += 1,
            }
        })),
    )
    .unwrap();
    log
}

/// Three layers where the first weight is shared with the last (so its
/// gradient gets a contribution at both ends of the walk), a reshape view
/// of a parameter, and one parameter nothing reads.
struct Net {
    w1: Tensor,
    b1: Tensor,
    w2: Tensor,
    flat: Tensor,
    _unused: Tensor,
}

fn values(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 1000.0 - 0.5)
        .collect()
}

impl Net {
    fn new(c: &mut Context) -> Net {
        Net {
            w1: c.param(&[4, 4], Some(&values(16, 1))).unwrap(),
            b1: c.param(&[1, 4], Some(&values(4, 2))).unwrap(),
            _unused: c.param(&[3], Some(&values(3, 3))).unwrap(),
            w2: c.param(&[4, 4], Some(&values(16, 4))).unwrap(),
            flat: c.param(&[8], Some(&values(8, 5))).unwrap(),
        }
    }

    fn loss(&self, c: &mut Context, seed: u32, segment: bool) -> Tensor {
        let x = c.tensor(&[2, 4], &values(8, seed)).unwrap();
        let h = c.matmul(x, self.w1, false, false).unwrap();
        if segment {
            c.segment_begin().unwrap();
        }
        let h = c.add(h, self.b1).unwrap();
        let h = c.tanh(h).unwrap();
        let h = c.matmul(h, self.w2, false, false).unwrap();
        let h = c.tanh(h).unwrap();
        if segment {
            c.segment_end(&[h]).unwrap();
        }
        let v = c.reshape(self.flat, &[2, 4]).unwrap();
        let h = c.mul(h, v).unwrap();
        let h = c.matmul(h, self.w1, false, true).unwrap();
        let h = c.mul(h, h).unwrap();
        c.sum(h).unwrap()
    }
}

/// The ranges tile the block exactly once, each equals the final gradient
/// at its place, and each is a run of whole parameters.
fn check_walk(c: &Context, log: &Log, bucket_bytes: usize) {
    let g = c.grads();
    let mut covered = vec![0u8; g.len()];
    let mut starts = vec![0usize];
    for p in 0..c.param_count() {
        let last = *starts.last().unwrap();
        starts.push(last + c.entry(p as u32).shape.numel());
    }
    for (first, v, _) in &log.ranges {
        let end = first + v.len();
        assert!(
            starts.contains(first) && starts.contains(&end),
            "{first}..{end}"
        );
        assert!(
            v.len() * 4 >= bucket_bytes || *first == 0,
            "range {first}..{end} under {bucket_bytes} bytes"
        );
        covered[*first..end].iter_mut().for_each(|n| *n += 1);
        // Bit for bit: nothing was added after the report.
        let same = v
            .iter()
            .zip(&g[*first..end])
            .all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(same, "range {first}..{end} changed after it was reported");
    }
    assert!(covered.iter().all(|&n| n == 1), "coverage {covered:?}");
}

fn run(bucket_bytes: usize, policy: RecomputePolicy, accum: u32) {
    let mut c = Context::new();
    c.set_recompute(policy);
    let net = Net::new(&mut c);
    let log = listen(&mut c, bucket_bytes);
    for step in 0..3 {
        for m in 0..accum {
            *log.lock().unwrap() = Log::default();
            let loss = net.loss(&mut c, 10 + step * accum + m, true);
            c.backward(loss).unwrap();
            let l = log.lock().unwrap();
            check_walk(&c, &l, bucket_bytes);
            // Overlap happens: the first range comes before the walk ends
            // (w2 and flat are final before the first layer's backward).
            assert!(
                l.ranges[0].2 < l.ticks,
                "first range after {} of {} ticks",
                l.ranges[0].2,
                l.ticks
            );
            assert_eq!(l.ticks, c.tape_len());
            c.reset();
        }
        c.zero_grad();
    }
}

#[test]
fn each_parameter_alone() {
    run(0, RecomputePolicy::None, 1);
}

#[test]
fn buckets_of_several_parameters() {
    run(40, RecomputePolicy::None, 1);
    run(1 << 20, RecomputePolicy::None, 1);
}

#[test]
fn recomputed_segments_and_accumulation() {
    run(0, RecomputePolicy::All, 1);
    run(64, RecomputePolicy::All, 3);
    run(0, RecomputePolicy::None, 2);
}

/// The shared weight's range is the last one reported (its first reader
/// is the first op), and the unused parameter is reported before any tick.
#[test]
fn order_follows_the_walk() {
    let mut c = Context::new();
    let net = Net::new(&mut c);
    let log = listen(&mut c, 0);
    let loss = net.loss(&mut c, 7, false);
    c.backward(loss).unwrap();
    let l = log.lock().unwrap();
    assert_eq!(l.ranges.last().unwrap().0, 0, "w1 (at 0) is final last");
    let unused = l
        .ranges
        .iter()
        .find(|r| r.0 == 20)
        .expect("unused reported");
    assert_eq!(
        unused.2, 0,
        "a parameter nothing reads is final before the walk"
    );
    let _ = (net.b1, net.w2);
}

/// A loss that needs no gradient still reports the whole block once; no
/// callback, or a removed one, reports nothing.
#[test]
fn constant_loss_and_removal() {
    let mut c = Context::new();
    let net = Net::new(&mut c);
    let log = listen(&mut c, 0);
    let k = c.tensor(&[1], &[2.0]).unwrap();
    c.backward(k).unwrap();
    check_walk(&c, &log.lock().unwrap(), 0);
    assert_eq!(log.lock().unwrap().ranges.len(), 5);
    c.reset();
    c.set_grad_ready(0, None).unwrap();
    *log.lock().unwrap() = Log::default();
    let loss = net.loss(&mut c, 3, false);
    c.backward(loss).unwrap();
    assert!(log.lock().unwrap().ranges.is_empty());
}

/// Parameters added after the callback are laid out at the next backward.
#[test]
fn parameters_added_later() {
    let mut c = Context::new();
    let log = listen(&mut c, 0);
    let net = Net::new(&mut c);
    let loss = net.loss(&mut c, 4, false);
    c.backward(loss).unwrap();
    check_walk(&c, &log.lock().unwrap(), 0);
    assert_eq!(log.lock().unwrap().ranges.len(), 5);
}
