//! The NULL-context table: every exported function that takes a context,
//! called with a NULL one. `tests/ffi_contract.rs` checks each call gives
//! NULL_ARGUMENT; `tests/header_tables.rs` checks that every function of
//! include/arenagrad.h is in the table or in [`WITHOUT_A_NULL_CONTEXT_STATUS`].

use arenagrad::MemoryStats;
use arenagrad::ffi::*;
use std::ffi::CString;
use std::ptr::{null, null_mut};

/// The functions of the header that are not in the table, and why: they take
/// no context, or give a NULL one a meaning of their own (checked by
/// [`check_functions_without_a_null_context_status`]).
pub const WITHOUT_A_NULL_CONTEXT_STATUS: [(&str, &str); 6] = [
    ("ag_status_str", "takes no context"),
    ("ag_version", "takes no context"),
    ("ag_version_number", "takes no context"),
    (
        "ag_context_new",
        "makes a context: NULL out-pointer gives NULL_ARGUMENT",
    ),
    (
        "ag_context_free",
        "freeing NULL, or through a NULL pointer, does nothing",
    ),
    (
        "ag_context_last_error",
        "returns a message: one explaining the NULL",
    ),
];

/// Calls every function that takes a context with a NULL one, `p` and `q`
/// as tensor arguments; returns (function, status). Asserts that no
/// out-parameter was written.
#[allow(deprecated)] // also calls the deprecated aliases
pub fn calls_with_a_null_context(p: ag_tensor, q: ag_tensor) -> Vec<(&'static str, ag_status)> {
    let n = null_mut::<ag_context>();
    let shape = [2usize, 2];
    let data = [1.0f32; 4];
    let ids = [0i32; 2];
    let sentinel = ag_tensor {
        index: 0xA5A5_A5A5,
        context: 0x5A5A_5A5A,
        generation: 0xDEAD_BEEF_F00D_CAFE,
    };
    let mut o = sentinel;
    let mut s = MemoryStats {
        resets: 77,
        ..Default::default()
    };
    let mut dims = [9usize; AG_MAX_DIMS];
    let (mut nd, mut numel, mut f, mut ulen) = (9usize, 9usize, 9.0f32, 9usize);
    let mut buf = [9.0f32; 4];
    let mut gptr = null_mut::<f32>();
    let mut user = [9u8; 4];
    let mut name = [9 as std::ffi::c_char; 8];
    let step_sentinel = ag_step {
        index: 7,
        context: 9,
        generation: 11,
    };
    let mut st = step_sentinel;
    let path = CString::new("/tmp/never-written.ckpt").unwrap();
    let mut calls: Vec<(&str, ag_status)> = vec![
        ("ag_reset", ag_reset(n)),
        ("ag_set_grad_enabled", ag_set_grad_enabled(n, false)),
        ("ag_set_arena_limit", ag_set_arena_limit(n, 0)),
        ("ag_memory_stats", ag_memory_stats(n, &mut s)),
        (
            "ag_runtime_info",
            ag_runtime_info(n, &mut ag_runtime::default()),
        ),
        ("ag_set_recompute", ag_set_recompute(n, AG_RECOMPUTE_ALL)),
        (
            "ag_context_set_recompute",
            ag_context_set_recompute(n, AG_RECOMPUTE_ALL),
        ),
        ("ag_segment_begin", ag_segment_begin(n)),
        ("ag_capture_begin", ag_capture_begin(n)),
        ("ag_capture_end", ag_capture_end(n, p, &mut st)),
        ("ag_replay", ag_replay(n, st)),
        ("ag_step_free", ag_step_free(n, &mut st)),
        ("ag_input_new", ag_input_new(n, shape.as_ptr(), 2, &mut o)),
        ("ag_input_write", ag_input_write(n, p, data.as_ptr(), 4)),
        ("ag_seed_write", ag_seed_write(n, p, 7)),
        ("ag_dropout_seeded", ag_dropout_seeded(n, p, 0.5, q, &mut o)),
        (
            "ag_input_write_ids",
            ag_input_write_ids(n, st, 0, ids.as_ptr(), 2),
        ),
        ("ag_segment_end", ag_segment_end(n, p)),
        (
            "ag_param_new",
            ag_param_new(n, shape.as_ptr(), 2, data.as_ptr(), &mut o),
        ),
        ("ag_param_write", ag_param_write(n, p, data.as_ptr(), 4)),
        (
            "ag_param_init",
            ag_param_init(n, p, AG_INIT_NORMAL, 0.0, 0.02, 7),
        ),
        (
            "ag_param_new_named",
            ag_param_new_named(n, c"w".as_ptr(), shape.as_ptr(), 2, data.as_ptr(), &mut o),
        ),
        ("ag_param_count", ag_param_count(n, &mut numel)),
        ("ag_param_at", ag_param_at(n, 0, &mut o)),
        (
            "ag_param_name",
            ag_param_name(n, p, name.as_mut_ptr(), name.len(), &mut numel),
        ),
        (
            "ag_param_set_weight_decay",
            ag_param_set_weight_decay(n, p, false),
        ),
        ("ag_safetensors_save", ag_safetensors_save(n, path.as_ptr())),
        ("ag_safetensors_load", ag_safetensors_load(n, path.as_ptr())),
        (
            "ag_tensor_new",
            ag_tensor_new(n, shape.as_ptr(), 2, data.as_ptr(), &mut o),
        ),
        (
            "ag_tensor_shape",
            ag_tensor_shape(n, p, dims.as_mut_ptr(), &mut nd),
        ),
        ("ag_tensor_numel", ag_tensor_numel(n, p, &mut numel)),
        ("ag_tensor_read", ag_tensor_read(n, p, buf.as_mut_ptr(), 4)),
        (
            "ag_tensor_read_grad",
            ag_tensor_read_grad(n, p, buf.as_mut_ptr(), 4),
        ),
        ("ag_tensor_item", ag_tensor_item(n, p, &mut f)),
        ("ag_tensor_retain_grad", ag_tensor_retain_grad(n, p)),
        ("ag_backward", ag_backward(n, p)),
        ("ag_zero_grad", ag_zero_grad(n)),
        ("ag_optimizer_sgd", ag_optimizer_sgd(n, 0.1, 0.0, 0.0)),
        (
            "ag_optimizer_adamw",
            ag_optimizer_adamw(n, 0.1, 0.9, 0.999, 1e-8, 0.0),
        ),
        ("ag_optimizer_set_lr", ag_optimizer_set_lr(n, 0.1)),
        ("ag_optimizer_step", ag_optimizer_step(n)),
        ("ag_clip_grad_norm", ag_clip_grad_norm(n, 1.0, &mut f)),
        (
            "ag_checkpoint_save",
            ag_checkpoint_save(n, path.as_ptr(), null(), 0),
        ),
        (
            "ag_checkpoint_load",
            ag_checkpoint_load(n, path.as_ptr(), user.as_mut_ptr(), 4, &mut ulen),
        ),
        (
            "ag_checkpoint_load_bytes",
            ag_checkpoint_load_bytes(n, user.as_ptr(), 4, user.as_mut_ptr(), 4, &mut ulen),
        ),
        (
            "ag_checkpoint_peek",
            ag_checkpoint_peek(n, path.as_ptr(), user.as_mut_ptr(), 4, &mut ulen),
        ),
        (
            "ag_checkpoint_peek_bytes",
            ag_checkpoint_peek_bytes(n, user.as_ptr(), 4, user.as_mut_ptr(), 4, &mut ulen),
        ),
        ("ag_grads_len", ag_grads_len(n, &mut numel)),
        ("ag_grads_buffer", ag_grads_buffer(n, &mut gptr, &mut numel)),
        ("ag_optimizer_shard", ag_optimizer_shard(n, 0, 0)),
        (
            "ag_params_copy_out",
            ag_params_copy_out(n, 0, std::ptr::null_mut(), 0),
        ),
        (
            "ag_params_copy_in",
            ag_params_copy_in(n, 0, std::ptr::null(), 0),
        ),
        (
            "ag_optimizer_state_copy_out",
            ag_optimizer_state_copy_out(n, 0, 0, std::ptr::null_mut(), 0),
        ),
        (
            "ag_optimizer_state_copy_in",
            ag_optimizer_state_copy_in(n, 0, 0, std::ptr::null(), 0),
        ),
        (
            "ag_checkpoint_save_gathered",
            ag_checkpoint_save_gathered(n, path.as_ptr(), std::ptr::null(), 0, std::ptr::null(), 0),
        ),
        (
            "ag_set_grad_ready_callback",
            ag_set_grad_ready_callback(n, None, std::ptr::null_mut(), 0),
        ),
        (
            "ag_grads_copy_out",
            ag_grads_copy_out(n, buf.as_mut_ptr(), 4),
        ),
        ("ag_grads_copy_in", ag_grads_copy_in(n, data.as_ptr(), 4)),
        ("ag_add", ag_add(n, p, p, &mut o)),
        ("ag_sub", ag_sub(n, p, p, &mut o)),
        ("ag_mul", ag_mul(n, p, p, &mut o)),
        ("ag_div", ag_div(n, p, p, &mut o)),
        ("ag_neg", ag_neg(n, p, &mut o)),
        ("ag_exp", ag_exp(n, p, &mut o)),
        ("ag_log", ag_log(n, p, &mut o)),
        ("ag_tanh", ag_tanh(n, p, &mut o)),
        ("ag_relu", ag_relu(n, p, &mut o)),
        ("ag_sigmoid", ag_sigmoid(n, p, &mut o)),
        ("ag_gelu", ag_gelu(n, p, &mut o)),
        ("ag_sqrt", ag_sqrt(n, p, &mut o)),
        ("ag_sum", ag_sum(n, p, &mut o)),
        ("ag_mean", ag_mean(n, p, &mut o)),
        ("ag_scale", ag_scale(n, p, 2.0, &mut o)),
        ("ag_sum_axis", ag_sum_axis(n, p, 0, false, &mut o)),
        (
            "ag_logsumexp_axis",
            ag_logsumexp_axis(n, p, 0, false, &mut o),
        ),
        ("ag_mean_axis", ag_mean_axis(n, p, 0, true, &mut o)),
        ("ag_reshape", ag_reshape(n, p, shape.as_ptr(), 2, &mut o)),
        (
            "ag_permute",
            ag_permute(n, p, [1usize, 0].as_ptr(), 2, &mut o),
        ),
        ("ag_transpose", ag_transpose(n, p, 0, 1, &mut o)),
        ("ag_concat", ag_concat(n, [p, q].as_ptr(), 2, 0, &mut o)),
        ("ag_slice", ag_slice(n, p, 0, 0, 1, &mut o)),
        ("ag_dropout", ag_dropout(n, p, 0.5, 7, &mut o)),
        ("ag_matmul", ag_matmul(n, p, q, false, false, &mut o)),
        ("ag_bmm", ag_bmm(n, p, q, false, false, &mut o)),
        ("ag_linear", ag_linear(n, p, q, null(), &mut o)),
        ("ag_embedding", ag_embedding(n, p, ids.as_ptr(), 2, &mut o)),
        (
            "ag_cross_entropy",
            ag_cross_entropy(n, p, ids.as_ptr(), 2, &mut o),
        ),
        ("ag_layernorm", ag_layernorm(n, p, q, q, &mut o)),
        ("ag_softmax", ag_softmax(n, p, true, 1.0, &mut o)),
        ("ag_attention", ag_attention(n, p, 1, &mut o)),
        ("ag_pow", ag_pow(n, p, 2.0, &mut o)),
        ("ag_abs", ag_abs(n, p, &mut o)),
        ("ag_log1p", ag_log1p(n, p, &mut o)),
        ("ag_lgamma", ag_lgamma(n, p, &mut o)),
        ("ag_digamma", ag_digamma(n, p, &mut o)),
        ("ag_expm1", ag_expm1(n, p, &mut o)),
        ("ag_softplus", ag_softplus(n, p, &mut o)),
        ("ag_log_sigmoid", ag_log_sigmoid(n, p, &mut o)),
        ("ag_erf", ag_erf(n, p, &mut o)),
        ("ag_normal_cdf", ag_normal_cdf(n, p, &mut o)),
        ("ag_normal_lcdf", ag_normal_lcdf(n, p, &mut o)),
        ("ag_maximum", ag_maximum(n, p, p, &mut o)),
        ("ag_minimum", ag_minimum(n, p, p, &mut o)),
        ("ag_clamp", ag_clamp(n, p, 0.0, 1.0, &mut o)),
        ("ag_where", ag_where(n, p, p, q, &mut o)),
        ("ag_log_softmax", ag_log_softmax(n, p, &mut o)),
        ("ag_mse_loss", ag_mse_loss(n, p, p, &mut o)),
    ];
    calls.extend(test_hook_calls());
    assert_eq!(o, sentinel);
    assert_eq!(st, step_sentinel);
    assert_eq!(s.resets, 77);
    assert_eq!(
        (dims, nd, numel, f, buf, user, ulen),
        ([9; AG_MAX_DIMS], 9, 9, 9.0, [9.0; 4], [9; 4], 9)
    );
    assert!(gptr.is_null());
    assert!(!std::path::Path::new("/tmp/never-written.ckpt").exists());
    calls
}

/// The entry points that exist for tests only (`ag_test_*`), compiled with
/// the `test-hooks` feature.
#[cfg(feature = "test-hooks")]
fn test_hook_calls() -> Vec<(&'static str, ag_status)> {
    let n = null_mut::<ag_context>();
    vec![
        ("ag_test_panic", ag_test_panic(n)),
        (
            "ag_test_fail_allocation",
            ag_test_fail_allocation(n, 1, false, null_mut()),
        ),
    ]
}

#[cfg(not(feature = "test-hooks"))]
fn test_hook_calls() -> Vec<(&'static str, ag_status)> {
    Vec::new()
}

/// What the functions of [`WITHOUT_A_NULL_CONTEXT_STATUS`] do with NULL.
pub fn check_functions_without_a_null_context_status() {
    assert!(!ag_status_str(AG_STATUS_NULL_ARGUMENT).is_null());
    assert!(!ag_version().is_null());
    assert_eq!(
        ag_version_number(),
        AG_VERSION_MAJOR * 10000 + AG_VERSION_MINOR * 100 + AG_VERSION_PATCH
    );
    assert_eq!(ag_context_new(null_mut()), AG_STATUS_NULL_ARGUMENT);
    assert_eq!(ag_context_free(null_mut()), AG_STATUS_OK);
    let mut none = null_mut::<ag_context>();
    assert_eq!(ag_context_free(&mut none), AG_STATUS_OK);
    assert!(super::ffi::last_error(null()).contains("NULL"));
}
