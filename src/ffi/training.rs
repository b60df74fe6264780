//! Training: backward, zero_grad, optimizers, clipping.

use super::prelude::*;
use crate::optim::OptimizerKind;

/// Reverse pass from the one-element `loss`: parameter gradients
/// accumulate (+=); only ops the loss depends on are differentiated. Once
/// per iteration (SEQUENCE on a second call). If nothing the loss depends
/// on needs a gradient (constants only, or grad mode was off when it was
/// built) it returns OK and changes nothing.
/// Errors: STALE_HANDLE, WRONG_CONTEXT, INVALID_HANDLE, NOT_SCALAR, SEQUENCE (backward already ran
/// this iteration), OUT_OF_MEMORY (activation gradients past the arena
/// cap).
#[unsafe(no_mangle)]
pub extern "C" fn ag_backward(ctx: *mut ag_context, loss: ag_tensor) -> ag_status {
    guard("ag_backward", ctx, |c| c.backward(loss.into()))
}

/// Sets every parameter gradient to zero.
/// Errors: none of its own.
#[unsafe(no_mangle)]
pub extern "C" fn ag_zero_grad(ctx: *mut ag_context) -> ag_status {
    guard("ag_zero_grad", ctx, |c| {
        c.zero_grad();
        Ok(())
    })
}

/// Creates the context's optimizer: SGD with momentum (0 for plain SGD) and
/// L2 weight decay, over all parameters made so far; state is allocated
/// now. The decay applies to parameters whose flag is on (all, unless
/// ag_param_set_weight_decay turned some off). Errors: INVALID_ARGUMENT (lr <= 0, momentum outside [0,1), a
/// negative weight decay, NaN or infinity), SEQUENCE (no parameters, or an
/// optimizer exists), ALLOCATION_FAILED.
#[unsafe(no_mangle)]
pub extern "C" fn ag_optimizer_sgd(
    ctx: *mut ag_context,
    lr: f32,
    momentum: f32,
    weight_decay: f32,
) -> ag_status {
    guard("ag_optimizer_sgd", ctx, |c| {
        c.optimizer(OptimizerKind::Sgd {
            lr,
            momentum,
            weight_decay,
        })
    })
}

/// Creates the context's optimizer: AdamW with bias correction and
/// decoupled weight decay (for parameters whose flag is on: see
/// ag_param_set_weight_decay). Errors: INVALID_ARGUMENT (lr <= 0, betas
/// outside [0,1), eps <= 0, a negative weight decay, NaN or infinity),
/// SEQUENCE (no parameters, or an optimizer exists), ALLOCATION_FAILED.
#[unsafe(no_mangle)]
pub extern "C" fn ag_optimizer_adamw(
    ctx: *mut ag_context,
    lr: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    weight_decay: f32,
) -> ag_status {
    guard("ag_optimizer_adamw", ctx, |c| {
        c.optimizer(OptimizerKind::AdamW {
            lr,
            beta1,
            beta2,
            eps,
            weight_decay,
        })
    })
}

/// Changes the optimizer's learning rate. Errors: INVALID_ARGUMENT (lr <= 0,
/// NaN or infinity), SEQUENCE (no optimizer).
#[unsafe(no_mangle)]
pub extern "C" fn ag_optimizer_set_lr(ctx: *mut ag_context, lr: f32) -> ag_status {
    guard("ag_optimizer_set_lr", ctx, |c| c.optimizer_set_lr(lr))
}

/// Updates every parameter from its gradient.
/// Errors: NON_FINITE (a gradient is NaN or infinite; parameters are left
/// bit-identical), SEQUENCE (no optimizer, or no ag_backward since the last
/// step).
#[unsafe(no_mangle)]
pub extern "C" fn ag_optimizer_step(ctx: *mut ag_context) -> ag_status {
    guard("ag_optimizer_step", ctx, |c| c.optimizer_step())
}

/// Scales all parameter gradients so their global L2 norm is at most
/// `max_norm`; writes the norm before clipping to `*norm_out` (may be NULL).
/// Errors: INVALID_ARGUMENT (max_norm <= 0, NaN or infinity), NON_FINITE
/// (the norm is NaN or infinite; nothing is scaled).
#[unsafe(no_mangle)]
pub extern "C" fn ag_clip_grad_norm(
    ctx: *mut ag_context,
    max_norm: f32,
    norm_out: *mut f32,
) -> ag_status {
    const F: &str = "ag_clip_grad_norm";
    guard(F, ctx, |c| {
        let n = c.clip_grad_norm(max_norm)?;
        if !norm_out.is_null() {
            write_out(F, "norm_out", norm_out, n)?;
        }
        Ok(())
    })
}
