//! A chain's evaluation of the model's log density, shared by ag_nuts_run
//! and ag_advi_run: a context of its own, the position written into a
//! parameter, the caller's density built (or, for a fixed graph, captured
//! at the first evaluation and replayed after), and its gradient read back.

use super::model::{Failure, ag_sampler, fail};
use crate::context::Step;
use crate::ffi::panic_hook::install_panic_hook;
use crate::ffi::prelude::*;
use crate::ffi::registry::{context_free, context_new, last_error};
use crate::infer::ChainDraws;
use std::ffi::CStr;
use std::sync::atomic::{AtomicBool, Ordering};

/// A chain's context, freed on drop (with its captured step).
pub(super) struct ChainContext {
    /// The C function running the chain, named in its messages.
    run: &'static str,
    ctx: *mut ag_context,
    position: Tensor,
    step: Option<(Step, Tensor)>,
}

// SAFETY: `ctx` is a registry token, not memory this value owns; every
// use claims the context through the registry, which allows one call at a
// time from any thread. A chain's turns run on whichever library thread
// holds its lock, one after another, so the context moves with the chain
// and is never used from two threads at once.
unsafe impl Send for ChainContext {}

impl Drop for ChainContext {
    fn drop(&mut self) {
        // The context dies with its step; nothing to report on failure.
        let _ = context_free(self.ctx);
    }
}

/// Runs `f` on the chain's context; a failure carries the context's message.
pub(super) fn with_ctx<T>(
    ctx: *mut ag_context,
    func: &'static str,
    f: impl FnOnce(&mut Context) -> Result<T>,
) -> std::result::Result<T, Failure> {
    let mut value = None;
    let st = guard(func, ctx, |c| {
        value = Some(f(c)?);
        Ok(())
    });
    match value {
        Some(v) if st == AG_STATUS_OK => Ok(v),
        _ => Err(fail(st, context_message(ctx))),
    }
}

fn context_message(ctx: *mut ag_context) -> String {
    // SAFETY: last_error never returns NULL, and its string is valid until
    // the next call on the context, which this thread alone makes.
    unsafe { CStr::from_ptr(last_error(ctx)) }
        .to_string_lossy()
        .into_owned()
}

impl ChainContext {
    /// A context with a position parameter of shape [dim], for `run`.
    pub(super) fn new(run: &'static str, dim: usize) -> std::result::Result<Self, Failure> {
        install_panic_hook();
        let ctx = context_new().ok_or_else(|| {
            fail(
                AG_STATUS_OUT_OF_MEMORY,
                "no context for the chain: 2^22 are alive".into(),
            )
        })?;
        let position = with_ctx(ctx, "ag_param_new", |c| c.param(&[dim], None));
        let position = position.inspect_err(|_| {
            // The context is not the chain's yet: free it here.
            let _ = context_free(ctx);
        })?;
        let cc = ChainContext {
            run,
            ctx,
            position,
            step: None,
        };
        Ok(cc)
    }

    /// log p at `q` into the return value and its gradient into `g`.
    pub(super) fn log_density(
        &mut self,
        s: &ag_sampler,
        q: &[f64],
        g: &mut [f64],
        buf: &mut [f32],
    ) -> std::result::Result<f64, Failure> {
        let (ctx, position) = (self.ctx, self.position);
        for (b, &v) in buf.iter_mut().zip(q) {
            *b = v as f32;
        }
        if let Some((step, lp)) = self.step {
            // A replay, the chain's every evaluation but its first: one
            // guarded call, one claim of the context, where three were.
            let value = with_ctx(ctx, "ag_replay", |c| {
                c.param_write(position, buf)?;
                c.zero_grad();
                c.replay(step)?;
                let v = c.item(lp)?;
                if v.is_finite() {
                    c.read_grad(position, buf)?;
                }
                Ok(v)
            })?;
            return Ok(Self::finish(value, g, buf));
        }
        with_ctx(ctx, "ag_param_write", |c| {
            c.param_write(position, buf)?;
            c.zero_grad();
            Ok(())
        })?;
        let value = {
            if s.fixed_graph {
                with_ctx(ctx, "ag_capture_begin", |c| c.capture_begin())?;
            }
            // A handle no context made: left as it is, it is refused.
            let mut out = ag_tensor {
                index: u32::MAX,
                context: 0,
                generation: u64::MAX,
            };
            // SAFETY: the caller's function, given a live context, its own
            // user pointer and a valid out-pointer, as the header documents.
            let st = unsafe { (s.log_density)(ctx, position.into(), s.user.0, &mut out) };
            if st != AG_STATUS_OK {
                let msg = context_message(ctx);
                return Err(fail(st, format!("the log density returned {st} ({msg})")));
            }
            let lp: Tensor = out.into();
            let v = with_ctx(ctx, "ag_tensor_item", |c| {
                let n = c.numel(lp)?;
                if n != 1 {
                    return Err(Error::InvalidArgument {
                        op: self.run,
                        what: format!("the log density has {n} elements, not 1 (a scalar)"),
                    });
                }
                c.item(lp)
            })
            .map_err(|f| {
                let status = if f.status == AG_STATUS_INVALID_ARGUMENT {
                    AG_STATUS_NOT_SCALAR
                } else {
                    f.status
                };
                fail(status, format!("the log density's result: {}", f.message))
            })?;
            if s.fixed_graph {
                let step = with_ctx(ctx, "ag_capture_end", |c| {
                    c.backward(lp)?;
                    c.capture_end(lp)
                })?;
                self.step = Some((step, lp));
            } else if v.is_finite() {
                with_ctx(ctx, "ag_backward", |c| c.backward(lp))?;
            }
            v
        };
        if value.is_finite() {
            with_ctx(ctx, "ag_tensor_read_grad", |c| c.read_grad(position, buf))?;
        }
        if self.step.is_none() {
            with_ctx(ctx, "ag_reset", |c| {
                c.reset();
                Ok(())
            })?;
        }
        Ok(Self::finish(value, g, buf))
    }

    /// The density's value as the sampler takes it (-inf for a
    /// non-finite one) and, for a finite one, its gradient from `buf`
    /// into `g`.
    fn finish(value: f32, g: &mut [f64], buf: &[f32]) -> f64 {
        if !value.is_finite() {
            return f64::NEG_INFINITY;
        }
        for (g, &b) in g.iter_mut().zip(buf) {
            *g = f64::from(b);
        }
        f64::from(value)
    }
}

/// The model's reported quantities at each of `draws`' positions, called
/// on this (the chain's) thread, as the positions of a chain of dim
/// n_reported (an empty chain when the model reports nothing). A failing
/// report stops the run, named by `func`, chain and draw (from 1).
pub(super) fn report_draws(
    func: &str,
    s: &ag_sampler,
    chain: u32,
    draws: &ChainDraws,
) -> std::result::Result<ChainDraws, Failure> {
    let Some(r) = &s.reporter else {
        return Ok(ChainDraws::default());
    };
    let mut out = ChainDraws {
        dim: r.n,
        positions: vec![0.0; draws.completed() * r.n],
        ..ChainDraws::default()
    };
    let rows = out.positions.chunks_exact_mut(r.n);
    for (i, (q, v)) in draws
        .positions
        .chunks_exact(draws.dim)
        .zip(rows)
        .enumerate()
    {
        // SAFETY: the caller's function, given `dim` doubles to read,
        // `n_reported` to write and its own user pointer, as the header
        // documents.
        let st = unsafe { (r.report)(q.as_ptr(), s.user.0, v.as_mut_ptr()) };
        if st != AG_STATUS_OK {
            return Err(fail(
                st,
                format!(
                    "{func}: chain {chain}, draw {}: the report function returned {st}",
                    i + 1
                ),
            ));
        }
    }
    Ok(out)
}

/// Marks a sampler as running until dropped, however the run ends (a
/// panic included).
pub(super) struct Running<'a>(&'a AtomicBool);

impl<'a> Running<'a> {
    /// Marks `s` running, or refuses (BUSY) when a run on it is under way.
    pub(super) fn start(func: &str, s: &'a ag_sampler) -> std::result::Result<Self, Failure> {
        if s.running.swap(true, Ordering::Acquire) {
            return Err(fail(
                AG_STATUS_BUSY,
                format!("{func}: a run on this sampler is under way"),
            ));
        }
        Ok(Running(&s.running))
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}
