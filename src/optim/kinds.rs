//! The optimizer kinds: their hyper-parameters, their checks, and each
//! kind's row ([`KindRow`]), the one place that states what the rest of the
//! crate (state allocation, checkpoints, sharding) needs to know of it.

use crate::error::{Error, Result};

/// Hyper-parameters of the two optimizers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum OptimizerKind {
    /// v = momentum * v + (g + weight_decay * p); p -= lr * v.
    Sgd {
        lr: f32,
        momentum: f32,
        weight_decay: f32,
    },
    /// Adam with bias correction and decoupled weight decay:
    /// p -= lr * (m_hat / (sqrt(v_hat) + eps) + weight_decay * p).
    AdamW {
        lr: f32,
        beta1: f32,
        beta2: f32,
        eps: f32,
        weight_decay: f32,
    },
}

/// Most moments any kind keeps per float (the state's slots per parameter).
pub(crate) const MAX_MOMENTS: usize = 2;

/// How a kind's update splits over float ranges of the flat parameter
/// layout (see [`Context::optimizer_shard`](crate::Context::optimizer_shard)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sharding {
    /// Each float's update reads only that float's gradient, moments and
    /// value: any float range can be updated apart, changing the same bits.
    PerFloat,
}

/// What the crate needs to know of one optimizer kind besides its update.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KindRow {
    /// The kind's name in messages.
    pub name: &'static str,
    /// The checkpoint's `opt_kind` field (0 is "no optimizer").
    pub tag: u32,
    /// Moments kept per float by this instance (at most [`MAX_MOMENTS`]).
    pub moments: usize,
    /// Every moment count an instance of this kind may keep: what a
    /// checkpoint with this tag may carry.
    pub moment_counts: &'static [usize],
    /// The checkpoint's five hyper-parameter floats.
    pub hyper: [f32; 5],
    pub sharding: Sharding,
}

impl OptimizerKind {
    /// One instance of each kind, in tag order: what a checkpoint's tag is
    /// checked against before a model is at hand.
    pub(crate) const EACH: [OptimizerKind; 2] = [
        OptimizerKind::Sgd {
            lr: 1.0,
            momentum: 0.0,
            weight_decay: 0.0,
        },
        OptimizerKind::AdamW {
            lr: 1.0,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
        },
    ];

    /// This kind's row. Adding a kind adds an arm here (the match is
    /// exhaustive) and an instance to [`EACH`](Self::EACH).
    pub(crate) fn row(&self) -> KindRow {
        match *self {
            OptimizerKind::Sgd {
                lr,
                momentum,
                weight_decay,
            } => KindRow {
                name: "sgd",
                tag: 1,
                moments: usize::from(momentum > 0.0),
                moment_counts: &[0, 1],
                hyper: [lr, momentum, 0.0, 0.0, weight_decay],
                sharding: Sharding::PerFloat,
            },
            OptimizerKind::AdamW {
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
            } => KindRow {
                name: "adamw",
                tag: 2,
                moments: 2,
                moment_counts: &[2],
                hyper: [lr, beta1, beta2, eps, weight_decay],
                sharding: Sharding::PerFloat,
            },
        }
    }

    /// Whether a checkpoint may pair optimizer tag `tag` with `moments`
    /// moments per float (tag 0, no optimizer, with none).
    pub(crate) fn tag_fits(tag: u32, moments: usize) -> bool {
        (tag == 0 && moments == 0)
            || Self::EACH
                .iter()
                .map(OptimizerKind::row)
                .any(|r| r.tag == tag && r.moment_counts.contains(&moments))
    }

    /// The name of the kind with checkpoint tag `tag`, for messages.
    pub(crate) fn tag_name(tag: u32) -> &'static str {
        match Self::EACH
            .iter()
            .map(OptimizerKind::row)
            .find(|r| r.tag == tag)
        {
            Some(row) => row.name,
            None if tag == 0 => "none",
            None => "unknown",
        }
    }

    /// The learning rate, to change it (schedules).
    pub(crate) fn lr_mut(&mut self) -> &mut f32 {
        match self {
            OptimizerKind::Sgd { lr, .. } | OptimizerKind::AdamW { lr, .. } => lr,
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        const OP: &str = "optimizer_new";
        match *self {
            OptimizerKind::Sgd {
                lr,
                momentum,
                weight_decay,
            } => {
                check(OP, "lr", lr, lr > 0.0, "finite and > 0")?;
                check(
                    OP,
                    "momentum",
                    momentum,
                    (0.0..1.0).contains(&momentum),
                    "in [0, 1)",
                )?;
                check(
                    OP,
                    "weight_decay",
                    weight_decay,
                    weight_decay >= 0.0,
                    "finite and >= 0",
                )
            }
            OptimizerKind::AdamW {
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
            } => {
                check(OP, "lr", lr, lr > 0.0, "finite and > 0")?;
                check(OP, "beta1", beta1, (0.0..1.0).contains(&beta1), "in [0, 1)")?;
                check(OP, "beta2", beta2, (0.0..1.0).contains(&beta2), "in [0, 1)")?;
                check(OP, "eps", eps, eps > 0.0, "finite and > 0")?;
                check(
                    OP,
                    "weight_decay",
                    weight_decay,
                    weight_decay >= 0.0,
                    "finite and >= 0",
                )
            }
        }
    }
}

pub(crate) fn check(op: &'static str, name: &str, v: f32, ok: bool, want: &str) -> Result<()> {
    if v.is_finite() && ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument {
            op,
            what: format!("{name} = {v} must be {want}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `EACH` holds every kind once, in tag order 1, 2, ...: `slot` is an
    /// exhaustive match, so a new kind does not build until it has a slot,
    /// which names its place in `EACH`.
    #[test]
    fn each_holds_every_kind_once() {
        let slot = |k: &OptimizerKind| match k {
            OptimizerKind::Sgd { .. } => 0,
            OptimizerKind::AdamW { .. } => 1,
        };
        for (i, k) in OptimizerKind::EACH.iter().enumerate() {
            assert_eq!(slot(k), i, "{k:?} out of place in EACH");
            let row = k.row();
            assert_eq!(row.tag as usize, i + 1, "{}: tags count from 1", row.name);
            assert!(row.moments <= MAX_MOMENTS);
            assert!(row.moment_counts.iter().all(|&m| m <= MAX_MOMENTS));
            assert!(
                k.validate().is_ok(),
                "{}: EACH holds valid instances",
                row.name
            );
        }
    }

    /// Every moment count an instance keeps is one its tag admits.
    #[test]
    fn instance_moments_fit_the_tag() {
        for k in [
            OptimizerKind::Sgd {
                lr: 0.1,
                momentum: 0.9,
                weight_decay: 0.0,
            },
            OptimizerKind::Sgd {
                lr: 0.1,
                momentum: 0.0,
                weight_decay: 0.0,
            },
        ]
        .iter()
        .chain(&OptimizerKind::EACH)
        {
            let row = k.row();
            assert!(OptimizerKind::tag_fits(row.tag, row.moments), "{k:?}");
        }
        assert_eq!(OptimizerKind::tag_name(0), "none");
        assert_eq!(OptimizerKind::tag_name(2), "adamw");
        assert_eq!(OptimizerKind::tag_name(9), "unknown");
        assert!(OptimizerKind::tag_fits(0, 0));
        assert!(!OptimizerKind::tag_fits(0, 1));
        assert!(!OptimizerKind::tag_fits(2, 1));
        assert!(!OptimizerKind::tag_fits(3, 0));
    }
}
