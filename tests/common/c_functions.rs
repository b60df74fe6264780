// The C functions of arenagrad: ONE row per exported function. Every test
// table that lists C functions is generated from this file or checked
// against it, so a function added to src/ffi without a row here, or a row
// without one of its columns, fails a test that names the function.
//
// This file is not a module: each consumer defines its own `c_functions!`
// macro and writes `include!("c_functions.rs")` (or the path to it) where it
// wants the rows expanded, so that the expressions of a column are compiled
// in the scope of the function that runs them (see the names below).
//
// # Adding a C function (checklist)
//
// 1. The wrapper in src/ffi (ops in src/ffi/ops/<family>.rs), importing
//    only `crate::ffi::prelude::*` and the safe API, with a doc comment
//    ending in "Errors:"; then `make header`.
//    Enforced by: tests/header.rs (the committed header is fresh),
//    tests/module_graph.rs (no import cycle in src/ffi), tests/src_file_sizes.rs
//    (file sizes), tests/status_contract.rs `every_status_function_documents_its_errors`
//    and `no_function_returns_an_undocumented_status` (the "Errors:" list).
// 2. A row here, in the API area of its file. Enforced by:
//    tests/header_tables.rs `every_header_function_has_a_row_in_the_c_function_table`
//    (names each header function without a row, and each row not in the header).
// 3. Its `fuzz:` cell: `ID => method`, `ID`, or `none("why")` (only a
//    deprecated alias or a test hook). ID is the constant of
//    fuzz/src/ffi_ops/ids.rs whose call reaches it: a new id in its area's
//    range, never a reused one (that constant is the one hand-written
//    place in the fuzz crate). ids::FUNCTIONS is generated from these
//    cells, and an undefined id does not compile (fuzz crate, and
//    tests/fuzz_corpus_replay.rs). `=> method` generates the id's arm in
//    FfiOps::call, `self.method("ag_<name>", ag_<name>)`, for a function
//    of a standard shape (`unary`, `binary`, `reduce_axis`, `product`: the
//    compiler checks the method and the function's type); with a bare `ID`
//    the arm is written by hand in fuzz/src/ffi_ops/mod.rs. Enforced by
//    tests/fuzz_corpus_replay.rs: `every_id_has_an_arm` (a call of an id
//    with no arm panics), `every_header_function_has_a_fuzz_id` (an id per
//    header function, and the harness calls it), and `ffi_ops_corpus_replays`
//    (the committed corpus must reach a successful call of each id: add an
//    input to fuzz/corpus/ffi_ops, e.g. by fuzzing).
// 4. Its `null:` cell: `call(expr)`, the function called with the NULL
//    context `n` (it must return NULL_ARGUMENT and write nothing), or
//    `none("why")` for a function that takes no context or gives NULL a
//    meaning of its own. Generated into tests/common/null_context.rs;
//    checked by tests/ffi_contract.rs (the statuses, nothing written) and by
//    tests/header_tables.rs `every_function_is_in_the_null_context_table`
//    (a `none` row must not take a context).
// 5. Its `contract:` cell: `call(expr)`, the function called with the
//    arguments the bad-input catalogue picks, or `none("why")` for a function
//    that does not take a context first. Generated into tests/status_contract.rs
//    `call`; `every_context_function_has_a_contract_call` names each function
//    taking a context without one (and each `call` row that takes none).
// 6. For an op, or another function taking a tensor handle: its `c:`
//    cell, `AG_OP("...")` or `AG_HANDLE_FN("...")`, the arguments of its
//    row of tests/c/ops.def after the name (that file's top comment says
//    what they are), which the C tests iterate over; then `make header`,
//    which writes tests/c/ops.def from these cells.
//    tests/header_tables.rs `every_function_taking_a_tensor_has_a_row_in_ops_def`
//    names each such function without the cell (and each cell on a function
//    that takes no tensor handle); tests/header.rs `committed_ops_def_is_fresh`
//    fails when the committed file is not what the cells generate.
//
// # The names each column can use
//
// * `null:` (in calls_with_a_null_context, tests/common/null_context.rs):
//   `n` the NULL context; `p`, `q` tensor handles; `o` an ag_tensor
//   out-value; `shape` [2, 2]; `data` 4 floats; `ids` 2 ints; `s`
//   MemoryStats; `dims`, `nd`, `numel`, `f`, `ulen`, `buf`, `gptr`, `user`,
//   `name` out-values; `st` an ag_step; `path` a C path that is never written.
// * `contract:` (in `call`, tests/status_contract.rs): `ctx` the context;
//   `fx` the fixture, `env` the environment, `a` the catalogue entry; `t`,
//   `u` tensor handles; `n` the length; `f` BUF floats; `p(ptr)`, `pm(ptr)`
//   NULL or ptr; `o` NULL or an out-handle; `fl` a float (NaN with a.null);
//   `shape`, `ids`, `bytes`, `sz`, `one`, `v`, `stats`;
//   `pp`, `ub`, `ul`, `data`, `dlen` for the checkpoint functions.
//
// A row may carry attributes (`#[cfg(feature = "test-hooks")]` for the
// test hooks, which exist only in that build).
c_functions! {
    // src/ffi/lifecycle.rs
    ag_status_str {
        fuzz: STATUS_STR,
        null: none("takes no context"),
        contract: none("takes no context first: tested on its own"),
    }
    ag_version {
        fuzz: STATUS_STR,
        null: none("takes no context"),
        contract: none("takes no context first: tested on its own"),
    }
    ag_version_number {
        fuzz: STATUS_STR,
        null: none("takes no context"),
        contract: none("takes no context first: tested on its own"),
    }
    ag_context_new {
        fuzz: CONTEXT_NEW,
        null: none("makes a context: NULL out-pointer gives NULL_ARGUMENT"),
        contract: none("takes no context first: tested on its own"),
    }
    ag_context_free {
        fuzz: CONTEXT_FREE,
        null: none("freeing NULL, or through a NULL pointer, does nothing"),
        contract: none("takes no context first: tested on its own"),
    }
    ag_context_last_error {
        fuzz: LAST_ERROR,
        null: none("returns a message: one explaining the NULL"),
        contract: none("takes no context first: tested on its own"),
    }
    ag_reset {
        fuzz: RESET,
        null: call(ag_reset(n)),
        contract: call(ag_reset(ctx)),
    }
    ag_set_grad_enabled {
        fuzz: SET_GRAD_ENABLED,
        null: call(ag_set_grad_enabled(n, false)),
        contract: call(ag_set_grad_enabled(ctx, a.null)),
    }
    ag_set_arena_limit {
        fuzz: SET_ARENA_LIMIT,
        null: call(ag_set_arena_limit(n, 0)),
        contract: call(ag_set_arena_limit(ctx, n)),
    }
    ag_memory_stats {
        fuzz: MEMORY_STATS,
        null: call(ag_memory_stats(n, &mut s)),
        contract: call(ag_memory_stats(ctx, if a.null { null_mut() } else { &mut stats })),
    }

    // src/ffi/tensors.rs
    ag_param_new {
        fuzz: PARAM_NEW,
        null: call(ag_param_new(n, shape.as_ptr(), 2, data.as_ptr(), &mut o)),
        contract: call(ag_param_new(ctx, shape.as_ptr(), n, p(f.as_ptr()), o)),
    }
    ag_param_write {
        fuzz: PARAM_WRITE,
        null: call(ag_param_write(n, p, data.as_ptr(), 4)),
        contract: call(ag_param_write(ctx, t, p(f.as_ptr()), n)),
        c: AG_HANDLE_FN("1, AG_NEED_PARAM, false, (2, 3), ag_param_write(c, t[0], s->src, 6)"),
    }
    ag_tensor_new {
        fuzz: TENSOR_NEW,
        null: call(ag_tensor_new(n, shape.as_ptr(), 2, data.as_ptr(), &mut o)),
        contract: call(ag_tensor_new(ctx, shape.as_ptr(), n, p(f.as_ptr()), o)),
    }
    ag_tensor_shape {
        fuzz: TENSOR_SHAPE,
        null: call(ag_tensor_shape(n, p, dims.as_mut_ptr(), &mut nd)),
        contract: call(ag_tensor_shape(
            ctx,
            t,
            if a.null { null_mut() } else { sz.as_mut_ptr() },
            &mut one,
        )),
        c: AG_HANDLE_FN("1, AG_NEED_ANY, true, (2, 3), ag_tensor_shape(c, t[0], AG_OUT(s->dims), &s->ndim)"),
    }
    ag_tensor_numel {
        fuzz: TENSOR_NUMEL,
        null: call(ag_tensor_numel(n, p, &mut numel)),
        contract: call(ag_tensor_numel(ctx, t, if a.null { null_mut() } else { &mut one })),
        c: AG_HANDLE_FN("1, AG_NEED_ANY, true, (2, 3), ag_tensor_numel(c, t[0], AG_OUT(&s->numel))"),
    }
    ag_tensor_read {
        fuzz: TENSOR_READ,
        null: call(ag_tensor_read(n, p, buf.as_mut_ptr(), 4)),
        contract: call(ag_tensor_read(ctx, t, pm(f.as_mut_ptr()), n)),
        c: AG_HANDLE_FN("1, AG_NEED_ANY, true, (2, 3), ag_tensor_read(c, t[0], AG_OUT(s->dst), 6)"),
    }
    ag_tensor_read_grad {
        fuzz: TENSOR_READ_GRAD,
        null: call(ag_tensor_read_grad(n, p, buf.as_mut_ptr(), 4)),
        contract: call(ag_tensor_read_grad(ctx, t, pm(f.as_mut_ptr()), n)),
        c: AG_HANDLE_FN("1, AG_NEED_GRAD, true, (2, 3), ag_tensor_read_grad(c, t[0], AG_OUT(s->dst), 6)"),
    }
    ag_tensor_retain_grad {
        fuzz: TENSOR_RETAIN_GRAD,
        null: call(ag_tensor_retain_grad(n, p)),
        contract: call(ag_tensor_retain_grad(ctx, t)),
        c: AG_HANDLE_FN("1, AG_NEED_PARAM, false, (2, 3), ag_tensor_retain_grad(c, t[0])"),
    }
    ag_tensor_item {
        fuzz: TENSOR_ITEM,
        null: call(ag_tensor_item(n, p, &mut f)),
        contract: call(ag_tensor_item(ctx, t, if a.null { null_mut() } else { &mut v })),
        c: AG_HANDLE_FN("1, AG_NEED_ANY, true, (1), ag_tensor_item(c, t[0], AG_OUT(&s->item))"),
    }

    // src/ffi/training.rs
    ag_backward {
        fuzz: BACKWARD,
        null: call(ag_backward(n, p)),
        contract: call(ag_backward(ctx, t)),
        c: AG_HANDLE_FN("1, AG_NEED_LOSS, false, (1), ag_backward(c, t[0])"),
    }
    ag_zero_grad {
        fuzz: ZERO_GRAD,
        null: call(ag_zero_grad(n)),
        contract: call(ag_zero_grad(ctx)),
    }
    ag_optimizer_sgd {
        fuzz: OPTIMIZER_SGD,
        null: call(ag_optimizer_sgd(n, 0.1, 0.0, 0.0)),
        contract: call(ag_optimizer_sgd(ctx, fl, 0.5, 0.0)),
    }
    ag_optimizer_adamw {
        fuzz: OPTIMIZER_ADAMW,
        null: call(ag_optimizer_adamw(n, 0.1, 0.9, 0.999, 1e-8, 0.0)),
        contract: call(ag_optimizer_adamw(ctx, fl, 0.9, 0.999, 1e-8, 0.0)),
    }
    ag_optimizer_set_lr {
        fuzz: OPTIMIZER_SET_LR,
        null: call(ag_optimizer_set_lr(n, 0.1)),
        contract: call(ag_optimizer_set_lr(ctx, fl)),
    }
    ag_optimizer_step {
        fuzz: OPTIMIZER_STEP,
        null: call(ag_optimizer_step(n)),
        contract: call(ag_optimizer_step(ctx)),
    }
    ag_clip_grad_norm {
        fuzz: CLIP_GRAD_NORM,
        null: call(ag_clip_grad_norm(n, 1.0, &mut f)),
        contract: call(ag_clip_grad_norm(ctx, fl, &mut v)),
    }

    // src/ffi/buffers.rs
    ag_set_training {
        fuzz: SET_TRAINING,
        null: call(ag_set_training(n, false)),
        contract: call(ag_set_training(ctx, a.null)),
    }
    ag_is_training {
        fuzz: SET_TRAINING,
        null: call({
            let mut flag = false;
            ag_is_training(n, &mut flag)
        }),
        contract: call({
            let mut flag = false;
            ag_is_training(ctx, if a.null { null_mut() } else { &mut flag })
        }),
    }
    ag_batch_norm_stats_new {
        fuzz: BATCH_NORM_STATS,
        null: call({
            let mut index = 0u32;
            ag_batch_norm_stats_new(n, c"bn".as_ptr(), 3, &mut index)
        }),
        contract: call({
            // n == 2: after a reset, where only the allocation can fail.
            if n == 2 {
                ag_reset(ctx);
            }
            let mut index = 0u32;
            let prefix = if a.null { null() } else { c"bn".as_ptr() };
            ag_batch_norm_stats_new(ctx, prefix, n, &mut index)
        }),
    }
    ag_batch_norm_stats_read {
        fuzz: BATCH_NORM_STATS,
        null: call({
            let mut count = 0i64;
            ag_batch_norm_stats_read(n, 0, buf.as_mut_ptr(), buf.as_mut_ptr(), 1, &mut count)
        }),
        contract: call({
            let (mut m, mut count) = ([0f32; BUF], 0i64);
            ag_batch_norm_stats_read(ctx, 0, pm(f.as_mut_ptr()), m.as_mut_ptr(), n, &mut count)
        }),
    }
    ag_batch_norm_stats_write {
        fuzz: BATCH_NORM_STATS,
        null: call(ag_batch_norm_stats_write(n, 0, data.as_ptr(), data.as_ptr(), 1, 0)),
        contract: call(ag_batch_norm_stats_write(ctx, 0, p(f.as_ptr()), f.as_ptr(), n, 0)),
    }

    // src/ffi/capture.rs
    ag_capture_begin {
        fuzz: CAPTURE_REPLAY,
        null: call(ag_capture_begin(n)),
        contract: call(ag_capture_begin(ctx)),
    }
    // Its C row: a capture around nothing, ending with t[0] (made before
    // it) as output.
    ag_capture_end {
        fuzz: CAPTURE_REPLAY,
        null: call(ag_capture_end(n, p, &mut st)),
        contract: call({
            // n != 0: a capture is open (the fixture's handles are then
            // stale: capture_begin ends the iteration).
            if n != 0 {
                ag_capture_begin(ctx);
            }
            let mut s = ag_step::default();
            ag_capture_end(ctx, t, if a.null { null_mut() } else { &mut s })
        }),
        c: AG_HANDLE_FN("1, AG_NEED_LOSS, true, (1), ag_capture_end(c, t[0], AG_OUT(&s->step))"),
    }
    ag_replay {
        fuzz: CAPTURE_REPLAY,
        null: call(ag_replay(n, st)),
        contract: call(ag_replay(ctx, step_arg(fx, env, a))),
    }
    ag_step_free {
        fuzz: CAPTURE_REPLAY,
        null: call(ag_step_free(n, &mut st)),
        contract: call({
            let mut s = step_arg(fx, env, a);
            ag_step_free(ctx, if a.null { null_mut() } else { &mut s })
        }),
    }
    ag_input_new {
        fuzz: CAPTURE_REPLAY,
        null: call(ag_input_new(n, shape.as_ptr(), 2, &mut o)),
        contract: call(ag_input_new(ctx, shape.as_ptr(), n, o)),
    }
    ag_input_write {
        fuzz: CAPTURE_REPLAY,
        null: call(ag_input_write(n, p, data.as_ptr(), 4)),
        contract: call(ag_input_write(ctx, t, p(f.as_ptr()), n)),
        c: AG_HANDLE_FN("1, AG_NEED_ANY, false, (2, 3), ag_input_write(c, t[0], s->src, 6)"),
    }
    // Any handle as the seed: none of the fixture's has shape [4].
    ag_seed_write {
        fuzz: DROPOUT_SEEDED,
        null: call(ag_seed_write(n, p, 7)),
        contract: call(ag_seed_write(ctx, t, n as u64)),
        c: AG_HANDLE_FN("1, AG_NEED_ANY, false, (4), ag_seed_write(c, t[0], 12345)"),
    }
    ag_dropout_seeded {
        fuzz: DROPOUT_SEEDED,
        null: call(ag_dropout_seeded(n, p, 0.5, q, &mut o)),
        contract: call({
            let p = if n == usize::MAX { f32::NAN } else { 0.5 };
            ag_dropout_seeded(ctx, fx.h, p, t, o)
        }),
        c: AG_OP("1, (2, 3), (1), (1), ag_dropout_seeded(c, t[0], 0.5f, op_seed(c, 12345), out)"),
    }
    ag_input_write_ids {
        fuzz: CAPTURE_REPLAY,
        null: call(ag_input_write_ids(n, st, 0, ids.as_ptr(), 2)),
        contract: call(ag_input_write_ids(
            ctx,
            step_arg(fx, env, a),
            0,
            if a.null { null() } else { ids.as_ptr() },
            n,
        )),
    }

    // src/ffi/checkpoints.rs
    ag_checkpoint_save {
        fuzz: CHECKPOINT_SAVE_LOAD_PEEK,
        null: call(ag_checkpoint_save(n, path.as_ptr(), null(), 0)),
        contract: call(ag_checkpoint_save(ctx, pp, ub, n)),
    }
    ag_checkpoint_save_gathered {
        fuzz: OPTIMIZER_STATE,
        null: call(ag_checkpoint_save_gathered(
            n,
            path.as_ptr(),
            std::ptr::null(),
            0,
            std::ptr::null(),
            0,
        )),
        contract: call({
            ag_checkpoint_save_gathered(ctx, pp, ub, n, p(f.as_ptr()), a.handle)
        }),
    }
    ag_checkpoint_load {
        fuzz: CHECKPOINT_SAVE_LOAD_PEEK,
        null: call(ag_checkpoint_load(n, path.as_ptr(), user.as_mut_ptr(), 4, &mut ulen)),
        contract: call(ag_checkpoint_load(ctx, pp, ub, n, ul)),
    }
    ag_checkpoint_load_bytes {
        fuzz: CHECKPOINT_LOAD_BYTES,
        null: call(ag_checkpoint_load_bytes(n, user.as_ptr(), 4, user.as_mut_ptr(), 4, &mut ulen)),
        contract: call(ag_checkpoint_load_bytes(ctx, data, dlen, ub, n, ul)),
    }
    ag_checkpoint_peek {
        fuzz: CHECKPOINT_SAVE_LOAD_PEEK,
        null: call(ag_checkpoint_peek(n, path.as_ptr(), user.as_mut_ptr(), 4, &mut ulen)),
        contract: call(ag_checkpoint_peek(ctx, pp, ub, n, ul)),
    }
    ag_checkpoint_peek_bytes {
        fuzz: CHECKPOINT_SAVE_LOAD_PEEK,
        null: call(ag_checkpoint_peek_bytes(n, user.as_ptr(), 4, user.as_mut_ptr(), 4, &mut ulen)),
        contract: call(ag_checkpoint_peek_bytes(ctx, data, dlen, ub, n, ul)),
    }

    // src/ffi/grads.rs
    ag_grads_len {
        fuzz: GRADS_BLOCK,
        null: call(ag_grads_len(n, &mut numel)),
        contract: call(ag_grads_len(ctx, if a.null { null_mut() } else { &mut one })),
    }
    ag_grads_buffer {
        fuzz: GRADS_BLOCK,
        null: call(ag_grads_buffer(n, &mut gptr, &mut numel)),
        contract: call({
            let mut gp = null_mut::<f32>();
            ag_grads_buffer(
                ctx,
                if a.null { null_mut() } else { &mut gp },
                if a.handle == 1 { null_mut() } else { &mut one },
            )
        }),
    }
    ag_grads_copy_out {
        fuzz: GRADS_BLOCK,
        null: call(ag_grads_copy_out(n, buf.as_mut_ptr(), 4)),
        contract: call(ag_grads_copy_out(ctx, pm(f.as_mut_ptr()), n)),
    }
    ag_grads_copy_in {
        fuzz: GRADS_BLOCK,
        null: call(ag_grads_copy_in(n, data.as_ptr(), 4)),
        contract: call(ag_grads_copy_in(ctx, p(f.as_ptr()), n)),
    }
    ag_set_grad_ready_callback {
        fuzz: GRAD_READY,
        null: call(ag_set_grad_ready_callback(n, None, std::ptr::null_mut(), 0)),
        contract: call(ag_set_grad_ready_callback(
            ctx,
            if a.null { None } else { Some(grad_ready_noop) },
            null_mut(),
            n,
        )),
    }

    // src/ffi/init.rs
    ag_param_init {
        fuzz: PARAM_INIT,
        null: call(ag_param_init(n, p, AG_INIT_NORMAL, 0.0, 0.02, 7)),
        contract: call({
            // n picks the kind: a normal, Xavier (refused for the 1-D
            // bias), a uniform with a > b, or an unknown kind.
            let kind = match n {
                0 => AG_INIT_NORMAL,
                1 => AG_INIT_XAVIER_UNIFORM,
                3 => AG_INIT_UNIFORM,
                _ => n.min(u32::MAX as usize) as u32,
            };
            let a = if kind == AG_INIT_XAVIER_UNIFORM {
                1.0
            } else {
                0.0
            };
            let b = match kind {
                AG_INIT_UNIFORM => -1.0,
                AG_INIT_XAVIER_UNIFORM => 0.0,
                _ => fl,
            };
            ag_param_init(ctx, t, kind, a, b, 7)
        }),
        c: AG_HANDLE_FN("1, AG_NEED_PARAM, false, (2, 3), ag_param_init(c, t[0], AG_INIT_NORMAL, 0.0f, 0.02f, 7)"),
    }

    // src/ffi/ops/elementwise.rs
    ag_add {
        fuzz: ADD => binary,
        null: call(ag_add(n, p, p, &mut o)),
        contract: call(ag_add(ctx, t, u, o)),
        c: AG_OP("2, (2, 3), (2, 3), (1), ag_add(c, t[0], t[1], out)"),
    }
    ag_sub {
        fuzz: SUB => binary,
        null: call(ag_sub(n, p, p, &mut o)),
        contract: call(ag_sub(ctx, u, t, o)),
        c: AG_OP("2, (2, 3), (2, 3), (1), ag_sub(c, t[0], t[1], out)"),
    }
    ag_mul {
        fuzz: MUL => binary,
        null: call(ag_mul(n, p, p, &mut o)),
        contract: call(ag_mul(ctx, t, if a.handle == 8 { u } else { fx.w }, o)),
        c: AG_OP("2, (2, 3), (2, 3), (1), ag_mul(c, t[0], t[1], out)"),
    }
    ag_div {
        fuzz: DIV => binary,
        null: call(ag_div(n, p, p, &mut o)),
        contract: call(ag_div(ctx, if a.handle == 8 { u } else { fx.b }, t, o)),
        c: AG_OP("2, (2, 3), (2, 3), (1), ag_div(c, t[0], t[1], out)"),
    }
    ag_maximum {
        fuzz: MAXIMUM => binary,
        null: call(ag_maximum(n, p, p, &mut o)),
        contract: call(ag_maximum(ctx, t, u, o)),
        c: AG_OP("2, (2, 3), (2, 3), (1), ag_maximum(c, t[0], t[1], out)"),
    }
    ag_minimum {
        fuzz: MINIMUM => binary,
        null: call(ag_minimum(n, p, p, &mut o)),
        contract: call(ag_minimum(ctx, u, t, o)),
        c: AG_OP("2, (2, 3), (3), (1), ag_minimum(c, t[0], t[1], out)"),
    }
    ag_where {
        fuzz: WHERE,
        null: call(ag_where(n, p, p, q, &mut o)),
        contract: call(ag_where(ctx, u, t, t, o)),
        c: AG_OP("3, (2, 1), (2, 3), (3), ag_where(c, t[0], t[1], t[2], out)"),
    }
    ag_neg {
        fuzz: NEG => unary,
        null: call(ag_neg(n, p, &mut o)),
        contract: call(ag_neg(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_neg(c, t[0], out)"),
    }
    ag_exp {
        fuzz: EXP => unary,
        null: call(ag_exp(n, p, &mut o)),
        contract: call(ag_exp(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_exp(c, t[0], out)"),
    }
    ag_log {
        fuzz: LOG => unary,
        null: call(ag_log(n, p, &mut o)),
        contract: call(ag_log(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_log(c, t[0], out)"),
    }
    ag_tanh {
        fuzz: TANH => unary,
        null: call(ag_tanh(n, p, &mut o)),
        contract: call(ag_tanh(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_tanh(c, t[0], out)"),
    }
    ag_relu {
        fuzz: RELU => unary,
        null: call(ag_relu(n, p, &mut o)),
        contract: call(ag_relu(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_relu(c, t[0], out)"),
    }
    ag_sigmoid {
        fuzz: SIGMOID => unary,
        null: call(ag_sigmoid(n, p, &mut o)),
        contract: call(ag_sigmoid(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_sigmoid(c, t[0], out)"),
    }
    ag_sqrt {
        fuzz: SQRT => unary,
        null: call(ag_sqrt(n, p, &mut o)),
        contract: call(ag_sqrt(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_sqrt(c, t[0], out)"),
    }
    ag_abs {
        fuzz: ABS => unary,
        null: call(ag_abs(n, p, &mut o)),
        contract: call(ag_abs(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_abs(c, t[0], out)"),
    }
    ag_clamp {
        fuzz: CLAMP,
        null: call(ag_clamp(n, p, 0.0, 1.0, &mut o)),
        contract: call(ag_clamp(ctx, t, -1.0, if n == 0 { -2.0 } else { fl }, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_clamp(c, t[0], 0.8f, 1.2f, out)"),
    }
    ag_pow {
        fuzz: POW,
        null: call(ag_pow(n, p, 2.0, &mut o)),
        contract: call(ag_pow(ctx, t, if n == 0 { f32::NAN } else { 2.0 }, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_pow(c, t[0], 1.5f, out)"),
    }
    ag_gelu {
        fuzz: GELU => unary,
        null: call(ag_gelu(n, p, &mut o)),
        contract: call(ag_gelu(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_gelu(c, t[0], out)"),
    }
    ag_scale {
        fuzz: SCALE,
        null: call(ag_scale(n, p, 2.0, &mut o)),
        contract: call(ag_scale(ctx, t, fl, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_scale(c, t[0], 0.5f, out)"),
    }

    // src/ffi/ops/special.rs
    ag_log1p {
        fuzz: LOG1P => unary,
        null: call(ag_log1p(n, p, &mut o)),
        contract: call(ag_log1p(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_log1p(c, t[0], out)"),
    }
    ag_lgamma {
        fuzz: LGAMMA => unary,
        null: call(ag_lgamma(n, p, &mut o)),
        contract: call(ag_lgamma(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_lgamma(c, t[0], out)"),
    }
    ag_digamma {
        fuzz: DIGAMMA => unary,
        null: call(ag_digamma(n, p, &mut o)),
        contract: call(ag_digamma(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_digamma(c, t[0], out)"),
    }
    ag_expm1 {
        fuzz: EXPM1 => unary,
        null: call(ag_expm1(n, p, &mut o)),
        contract: call(ag_expm1(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_expm1(c, t[0], out)"),
    }
    ag_softplus {
        fuzz: SOFTPLUS => unary,
        null: call(ag_softplus(n, p, &mut o)),
        contract: call(ag_softplus(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_softplus(c, t[0], out)"),
    }
    ag_log_sigmoid {
        fuzz: LOG_SIGMOID => unary,
        null: call(ag_log_sigmoid(n, p, &mut o)),
        contract: call(ag_log_sigmoid(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_log_sigmoid(c, t[0], out)"),
    }
    ag_erf {
        fuzz: ERF => unary,
        null: call(ag_erf(n, p, &mut o)),
        contract: call(ag_erf(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_erf(c, t[0], out)"),
    }
    ag_normal_cdf {
        fuzz: NORMAL_CDF => unary,
        null: call(ag_normal_cdf(n, p, &mut o)),
        contract: call(ag_normal_cdf(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_normal_cdf(c, t[0], out)"),
    }
    ag_normal_lcdf {
        fuzz: NORMAL_LCDF => unary,
        null: call(ag_normal_lcdf(n, p, &mut o)),
        contract: call(ag_normal_lcdf(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_normal_lcdf(c, t[0], out)"),
    }
    ag_trigamma {
        fuzz: TRIGAMMA => unary,
        null: call(ag_trigamma(n, p, &mut o)),
        contract: call(ag_trigamma(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_trigamma(c, t[0], out)"),
    }
    ag_inv_phi {
        fuzz: INV_PHI => unary,
        null: call(ag_inv_phi(n, p, &mut o)),
        contract: call(ag_inv_phi(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_inv_phi(c, t[0], out)"),
    }
    ag_cholesky {
        fuzz: CHOLESKY => unary,
        null: call(ag_cholesky(n, p, &mut o)),
        contract: call(ag_cholesky(ctx, t, o)),
        c: AG_OP("1, (3, 3), (1), (1), ag_cholesky(c, t[0], out)"),
    }
    ag_solve_lower {
        fuzz: SOLVE_LOWER => binary,
        null: call(ag_solve_lower(n, p, q, &mut o)),
        contract: call(ag_solve_lower(ctx, t, u, o)),
        c: AG_OP("2, (3, 3), (3, 2), (1), ag_solve_lower(c, t[0], t[1], out)"),
    }
    ag_log_det_spd {
        fuzz: LOG_DET_SPD => unary,
        null: call(ag_log_det_spd(n, p, &mut o)),
        contract: call(ag_log_det_spd(ctx, t, o)),
        c: AG_OP("1, (3, 3), (1), (1), ag_log_det_spd(c, t[0], out)"),
    }
    ag_linear_recurrence {
        fuzz: LINEAR_RECURRENCE => binary,
        null: call(ag_linear_recurrence(n, p, q, &mut o)),
        contract: call(ag_linear_recurrence(ctx, t, u, o)),
        c: AG_OP("2, (1), (4, 3), (1), ag_linear_recurrence(c, t[0], t[1], out)"),
    }
    ag_diagonal {
        fuzz: DIAGONAL => unary,
        null: call(ag_diagonal(n, p, &mut o)),
        contract: call(ag_diagonal(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_diagonal(c, t[0], out)"),
    }
    ag_constrain_lower {
        fuzz: CONSTRAIN_LOWER,
        null: call(ag_constrain_lower(n, p, 0.0, &mut o, null_mut())),
        contract: call(ag_constrain_lower(ctx, t, fl, o, o)),
        c: AG_HANDLE_FN("1, AG_NEED_ANY, true, (2, 3), ag_constrain_lower(c, t[0], 0.5f, AG_OUT(&s->y), &s->jac)"),
    }
    ag_constrain_upper {
        fuzz: CONSTRAIN_UPPER,
        null: call(ag_constrain_upper(n, p, 0.0, &mut o, null_mut())),
        contract: call(ag_constrain_upper(ctx, t, fl, o, o)),
        c: AG_HANDLE_FN("1, AG_NEED_ANY, true, (2, 3), ag_constrain_upper(c, t[0], 0.5f, AG_OUT(&s->y), &s->jac)"),
    }
    ag_constrain_interval {
        fuzz: CONSTRAIN_INTERVAL,
        null: call(ag_constrain_interval(n, p, 0.0, 1.0, &mut o, null_mut())),
        contract: call(ag_constrain_interval(ctx, t, fl, 2.0, o, o)),
        c: AG_HANDLE_FN("1, AG_NEED_ANY, true, (2, 3), ag_constrain_interval(c, t[0], -1.0f, 2.0f, AG_OUT(&s->y), &s->jac)"),
    }
    ag_constrain_cholesky_corr {
        fuzz: CONSTRAIN_CHOLESKY_CORR,
        null: call(ag_constrain_cholesky_corr(n, p, &mut o, null_mut())),
        contract: call(ag_constrain_cholesky_corr(ctx, t, o, o)),
        c: AG_HANDLE_FN("1, AG_NEED_ANY, true, (3), ag_constrain_cholesky_corr(c, t[0], AG_OUT(&s->y), &s->jac)"),
    }
    ag_log1m_exp {
        fuzz: LOG1M_EXP => unary,
        null: call(ag_log1m_exp(n, p, &mut o)),
        contract: call(ag_log1m_exp(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_log1m_exp(c, t[0], out)"),
    }
    ag_lbeta {
        fuzz: LBETA => binary,
        null: call(ag_lbeta(n, p, p, &mut o)),
        contract: call(ag_lbeta(ctx, t, u, o)),
        c: AG_OP("2, (2, 3), (3), (1), ag_lbeta(c, t[0], t[1], out)"),
    }
    ag_log_diff_exp {
        fuzz: LOG_DIFF_EXP => binary,
        null: call(ag_log_diff_exp(n, p, p, &mut o)),
        contract: call(ag_log_diff_exp(ctx, t, u, o)),
        c: AG_OP("2, (2, 3), (2, 3), (1), ag_log_diff_exp(c, t[0], t[1], out)"),
    }
    ag_gamma_p {
        fuzz: GAMMA_P => binary,
        null: call(ag_gamma_p(n, p, p, &mut o)),
        contract: call(ag_gamma_p(ctx, t, u, o)),
        c: AG_OP("2, (2, 3), (3), (1), ag_gamma_p(c, t[0], t[1], out)"),
    }
    ag_gamma_q {
        fuzz: GAMMA_Q => binary,
        null: call(ag_gamma_q(n, p, p, &mut o)),
        contract: call(ag_gamma_q(ctx, t, u, o)),
        c: AG_OP("2, (2, 3), (3), (1), ag_gamma_q(c, t[0], t[1], out)"),
    }
    ag_beta_inc {
        fuzz: BETA_INC,
        null: call(ag_beta_inc(n, p, p, q, &mut o)),
        contract: call(ag_beta_inc(ctx, u, t, t, o)),
        c: AG_OP("3, (2, 3), (3), (2, 1), ag_beta_inc(c, t[0], t[1], t[2], out)"),
    }

    // src/ffi/ops/reduce.rs
    ag_sum {
        fuzz: SUM => unary,
        null: call(ag_sum(n, p, &mut o)),
        contract: call(ag_sum(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_sum(c, t[0], out)"),
    }
    ag_mean {
        fuzz: MEAN => unary,
        null: call(ag_mean(n, p, &mut o)),
        contract: call(ag_mean(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_mean(c, t[0], out)"),
    }
    ag_sum_axis {
        fuzz: SUM_AXIS => reduce_axis,
        null: call(ag_sum_axis(n, p, 0, false, &mut o)),
        contract: call(ag_sum_axis(ctx, t, n as i32, a.null, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_sum_axis(c, t[0], 1, true, out)"),
    }
    ag_mean_axis {
        fuzz: MEAN_AXIS => reduce_axis,
        null: call(ag_mean_axis(n, p, 0, true, &mut o)),
        contract: call(ag_mean_axis(ctx, t, n as i32 - 2, a.null, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_mean_axis(c, t[0], 0, false, out)"),
    }
    ag_logsumexp_axis {
        fuzz: LOGSUMEXP_AXIS => reduce_axis,
        null: call(ag_logsumexp_axis(n, p, 0, false, &mut o)),
        contract: call(ag_logsumexp_axis(ctx, t, n as i32, a.null, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_logsumexp_axis(c, t[0], 1, true, out)"),
    }

    // src/ffi/ops/shape.rs
    ag_reshape {
        fuzz: RESHAPE,
        null: call(ag_reshape(n, p, shape.as_ptr(), 2, &mut o)),
        contract: call(ag_reshape(
            ctx,
            t,
            if a.null {
                [1usize << 31, 2].as_ptr()
            } else {
                shape.as_ptr()
            },
            n,
            o,
        )),
        c: AG_OP("1, (2, 3), (1), (1), ag_reshape(c, t[0], (const size_t[]){6}, 1, out)"),
    }
    ag_permute {
        fuzz: PERMUTE,
        null: call(ag_permute(n, p, [1usize, 0].as_ptr(), 2, &mut o)),
        contract: call(ag_permute(ctx, t, [1usize, 0, 2, 3, 4, 5, 6, 7].as_ptr(), n, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_permute(c, t[0], (const size_t[]){1, 0}, 2, out)"),
    }
    ag_concat {
        fuzz: CONCAT,
        null: call(ag_concat(n, [p, q].as_ptr(), 2, 0, &mut o)),
        contract: call({
            // Two operands: t beside b, whose rank differs from every
            // two-dimensional t (SHAPE_MISMATCH); one: t alone (OK).
            let mut xs = [t; BUF];
            xs[1] = fx.b;
            ag_concat(ctx, if a.null { null() } else { xs.as_ptr() }, n, 0, o)
        }),
        c: AG_OP("3, (2, 1), (2, 3), (2, 2), ag_concat(c, t, 3, -1, out)"),
    }
    ag_slice {
        fuzz: SLICE,
        null: call(ag_slice(n, p, 0, 0, 1, &mut o)),
        contract: call(ag_slice(ctx, t, if n == 12 { 5 } else { 0 }, 0, n, o)),
        c: AG_OP("1, (2, 4), (1), (1), ag_slice(c, t[0], 1, 1, 2, out)"),
    }
    ag_transpose {
        fuzz: TRANSPOSE,
        null: call(ag_transpose(n, p, 0, 1, &mut o)),
        contract: call(ag_transpose(ctx, t, n, 0, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_transpose(c, t[0], 1, 0, out)"),
    }

    // src/ffi/ops/matmul.rs
    ag_matmul {
        fuzz: MATMUL => product,
        null: call(ag_matmul(n, p, q, false, false, &mut o)),
        contract: call(ag_matmul(
            ctx,
            t,
            if a.handle == 8 { u } else { fx.w },
            a.null,
            false,
            o,
        )),
        c: AG_OP("2, (2, 3), (3, 4), (1), ag_matmul(c, t[0], t[1], false, false, out)"),
    }
    ag_bmm {
        fuzz: BMM => product,
        null: call(ag_bmm(n, p, q, false, false, &mut o)),
        contract: call(ag_bmm(
            ctx,
            t,
            if a.handle == 8 { u } else { fx.w },
            false,
            a.null,
            o,
        )),
        c: AG_OP("2, (2, 2, 3), (2, 3, 2), (1), ag_bmm(c, t[0], t[1], false, false, out)"),
    }
    ag_linear {
        fuzz: LINEAR,
        null: call(ag_linear(n, p, q, null(), &mut o)),
        contract: call(ag_linear(
            ctx,
            t,
            if a.handle == 8 { u } else { fx.w },
            if a.null { null() } else { &fx.b },
            o,
        )),
        c: AG_OP("3, (2, 3), (3, 4), (4), ag_linear(c, t[0], t[1], &t[2], out)"),
    }

    // src/ffi/ops/dropout.rs
    ag_dropout {
        fuzz: DROPOUT,
        null: call(ag_dropout(n, p, 0.5, 7, &mut o)),
        contract: call({
            let p = match n {
                0 => 1.0,
                usize::MAX => f32::NAN,
                _ => 0.5,
            };
            ag_dropout(ctx, t, p, n as u64, o)
        }),
        c: AG_OP("1, (2, 3), (1), (1), ag_dropout(c, t[0], 0.5f, 12345, out)"),
    }

    // src/ffi/ops/embedding.rs
    ag_embedding {
        fuzz: EMBEDDING,
        null: call(ag_embedding(n, p, ids.as_ptr(), 2, &mut o)),
        contract: call({
            let big_ids = [0i32; 1 << 16];
            let (w, p, len) = match a.handle {
                8 => (fx.row, big_ids.as_ptr(), big_ids.len()),
                _ if a.null => (t, null(), n),
                _ if n == 1 => (t, [4i32].as_ptr(), n),
                _ => (t, ids.as_ptr(), n),
            };
            ag_embedding(ctx, w, p, len, o)
        }),
        c: AG_OP("1, (4, 3), (1), (1), ag_embedding(c, t[0], (const int32_t[]){0, 3}, 2, out)"),
    }

    // src/ffi/ops/loss.rs
    ag_cross_entropy {
        fuzz: CROSS_ENTROPY,
        null: call(ag_cross_entropy(n, p, ids.as_ptr(), 2, &mut o)),
        contract: call({
            let targets = [3i32; BUF];
            let p = if a.null {
                null()
            } else if n == 2 {
                targets.as_ptr()
            } else {
                ids.as_ptr()
            };
            ag_cross_entropy(ctx, t, p, n, o)
        }),
        c: AG_OP("1, (2, 3), (1), (1), ag_cross_entropy(c, t[0], (const int32_t[]){0, 2}, 2, out)"),
    }
    ag_log_softmax {
        fuzz: LOG_SOFTMAX => unary,
        null: call(ag_log_softmax(n, p, &mut o)),
        contract: call(ag_log_softmax(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_log_softmax(c, t[0], out)"),
    }
    ag_normal_id_glm_lpdf {
        fuzz: NORMAL_ID_GLM,
        null: call(ag_normal_id_glm_lpdf(n, p, q, false, p, p, p, &mut o)),
        contract: call(ag_normal_id_glm_lpdf(ctx, u, t, false, t, t, t, o)),
        c: AG_OP("3, (4), (4, 1), (1), ag_normal_id_glm_lpdf(c, t[0], t[1], false, t[2], t[2], t[2], out)"),
    }
    ag_bernoulli_logit_glm_lpmf {
        fuzz: BERNOULLI_LOGIT_GLM,
        null: call(ag_bernoulli_logit_glm_lpmf(n, p, q, false, p, p, &mut o)),
        contract: call(ag_bernoulli_logit_glm_lpmf(ctx, u, t, false, t, t, o)),
        c: AG_OP("3, (4), (4, 1), (1), ag_bernoulli_logit_glm_lpmf(c, t[0], t[1], false, t[2], t[2], out)"),
    }
    ag_lkj_corr_cholesky_lpdf {
        fuzz: LKJ_CORR_CHOLESKY,
        null: call(ag_lkj_corr_cholesky_lpdf(n, p, 1.5, &mut o)),
        contract: call(ag_lkj_corr_cholesky_lpdf(ctx, t, 1.5, o)),
        c: AG_OP("1, (2, 2), (1), (1), ag_lkj_corr_cholesky_lpdf(c, t[0], 1.5f, out)"),
    }
    ag_normal_lpdf {
        fuzz: NORMAL_LPDF,
        null: call(ag_normal_lpdf(n, p, q, p, &mut o)),
        contract: call(ag_normal_lpdf(ctx, u, t, t, o)),
        c: AG_OP("3, (4), (1), (1), ag_normal_lpdf(c, t[0], t[1], t[2], out)"),
    }
    ag_mse_loss {
        fuzz: MSE_LOSS => binary,
        null: call(ag_mse_loss(n, p, p, &mut o)),
        contract: call(ag_mse_loss(ctx, t, u, o)),
        c: AG_OP("2, (2, 3), (2, 3), (1), ag_mse_loss(c, t[0], t[1], out)"),
    }

    // src/ffi/ops/norm.rs
    ag_layernorm {
        fuzz: LAYERNORM,
        null: call(ag_layernorm(n, p, q, q, &mut o)),
        contract: call(ag_layernorm(ctx, t, fx.b, fx.b, o)),
        c: AG_OP("3, (2, 3), (3), (3), ag_layernorm(c, t[0], t[1], t[2], out)"),
    }

    // src/ffi/ops/batch_norm.rs
    ag_batch_norm {
        fuzz: BATCH_NORM,
        null: call(ag_batch_norm(n, p, q, q, u32::MAX, 0.1, 1e-5, &mut o)),
        contract: call(ag_batch_norm(
            ctx,
            t,
            fx.b,
            fx.b,
            if n == 1 { 0 } else { u32::MAX },
            0.1,
            fl,
            o,
        )),
        c: AG_OP("3, (2, 3), (3), (3), ag_batch_norm(c, t[0], t[1], t[2], AG_NO_STATS, 0.1f, 1e-5f, out)"),
    }
    ag_group_norm {
        fuzz: GROUP_NORM,
        null: call(ag_group_norm(n, p, q, q, 1, 1e-5, &mut o)),
        contract: call(ag_group_norm(ctx, t, fx.b, fx.b, n, fl, o)),
        c: AG_OP("3, (2, 4), (4), (4), ag_group_norm(c, t[0], t[1], t[2], 2, 1e-5f, out)"),
    }
    ag_batch_norm_opt {
        fuzz: BATCH_NORM_OPT,
        null: call(ag_batch_norm_opt(n, p, null(), null(), u32::MAX, 0.1, 1e-5, &mut o)),
        contract: call(ag_batch_norm_opt(
            ctx,
            t,
            if a.null || a.handle.is_multiple_of(3) { null() } else { &fx.b },
            if a.null || a.handle % 2 == 1 { null() } else { &fx.b },
            if n == 1 { 0 } else { u32::MAX },
            0.1,
            fl,
            o,
        )),
        c: AG_OP("3, (2, 3), (3), (3), ag_batch_norm_opt(c, t[0], &t[1], &t[2], AG_NO_STATS, 0.1f, 1e-5f, out)"),
    }
    ag_group_norm_opt {
        fuzz: GROUP_NORM_OPT,
        null: call(ag_group_norm_opt(n, p, null(), null(), 1, 1e-5, &mut o)),
        contract: call(ag_group_norm_opt(
            ctx,
            t,
            if a.null || a.handle.is_multiple_of(3) { null() } else { &fx.b },
            if a.null || a.handle % 2 == 1 { null() } else { &fx.b },
            n,
            fl,
            o,
        )),
        c: AG_OP("3, (2, 4), (4), (4), ag_group_norm_opt(c, t[0], &t[1], &t[2], 2, 1e-5f, out)"),
    }

    // src/ffi/ops/attention.rs
    ag_softmax {
        fuzz: SOFTMAX,
        null: call(ag_softmax(n, p, true, 1.0, &mut o)),
        contract: call(ag_softmax(ctx, t, a.null, if n == 0 { f32::NAN } else { 1.0 }, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_softmax(c, t[0], true, 1.0f, out)"),
    }
    ag_attention {
        fuzz: ATTENTION,
        null: call(ag_attention(n, p, 1, &mut o)),
        contract: call(ag_attention(ctx, t, n, o)),
        c: AG_OP("1, (1, 2, 6), (1), (1), ag_attention(c, t[0], 2, out)"),
    }
    ag_attention_gqa {
        fuzz: ATTENTION_GQA,
        null: call(ag_attention_gqa(n, p, q, q, &mut o)),
        contract: call(ag_attention_gqa(ctx, t, t, t, o)),
        c: AG_OP("3, (1, 2, 3, 4), (1, 1, 3, 4), (1, 1, 3, 4), ag_attention_gqa(c, t[0], t[1], t[2], out)"),
    }

    // src/ffi/ops/llama.rs
    ag_silu {
        fuzz: SILU => unary,
        null: call(ag_silu(n, p, &mut o)),
        contract: call(ag_silu(ctx, t, o)),
        c: AG_OP("1, (2, 3), (1), (1), ag_silu(c, t[0], out)"),
    }
    ag_swiglu {
        fuzz: SWIGLU => binary,
        null: call(ag_swiglu(n, p, p, &mut o)),
        contract: call(ag_swiglu(ctx, t, if a.handle == 8 { u } else { fx.w }, o)),
        c: AG_OP("2, (2, 3), (2, 3), (1), ag_swiglu(c, t[0], t[1], out)"),
    }
    ag_rmsnorm {
        fuzz: RMSNORM,
        null: call(ag_rmsnorm(n, p, q, 1e-5, &mut o)),
        contract: call(ag_rmsnorm(ctx, t, fx.b, if n == 0 { f32::NAN } else { 1e-5 }, o)),
        c: AG_OP("2, (2, 3), (3), (1), ag_rmsnorm(c, t[0], t[1], 1e-5f, out)"),
    }
    ag_rope {
        fuzz: ROPE,
        null: call(ag_rope(n, p, 10000.0, 0, &mut o)),
        contract: call(ag_rope(ctx, t, if n == 0 { f32::NAN } else { 10000.0 }, n, o)),
        c: AG_OP("1, (1, 2, 3, 4), (1), (1), ag_rope(c, t[0], 10000.0f, 3, out)"),
    }

    // src/ffi/ops/conv.rs
    ag_conv2d {
        fuzz: CONV2D,
        null: call(ag_conv2d(n, p, q, null(), 1, 1, 0, 0, 1, 1, 1, &mut o)),
        contract: call(ag_conv2d(
            ctx,
            t,
            if a.handle == 8 { u } else { fx.w },
            if a.null { null() } else { &fx.b },
            n as i32,
            1,
            0,
            0,
            1,
            1,
            1,
            o,
        )),
        c: AG_OP("3, (1, 2, 5, 5), (3, 2, 3, 3), (3), ag_conv2d(c, t[0], t[1], &t[2], 2, 1, 1, 1, 1, 1, 1, out)"),
    }
    ag_conv2d_relu {
        fuzz: CONV2D_RELU,
        null: call(ag_conv2d_relu(n, p, q, null(), 1, 1, 0, 0, 1, 1, 1, &mut o)),
        contract: call(ag_conv2d_relu(
            ctx,
            t,
            if a.handle == 8 { u } else { fx.w },
            if a.null { null() } else { &fx.b },
            n as i32,
            1,
            0,
            0,
            1,
            1,
            1,
            o,
        )),
        c: AG_OP("3, (1, 2, 5, 5), (3, 2, 3, 3), (3), ag_conv2d_relu(c, t[0], t[1], &t[2], 1, 2, 1, 0, 1, 1, 1, out)"),
    }
    ag_conv1d {
        fuzz: CONV1D,
        null: call(ag_conv1d(n, p, q, null(), 1, 0, 1, 1, &mut o)),
        contract: call(ag_conv1d(
            ctx,
            t,
            if a.handle == 8 { u } else { fx.w },
            if a.null { null() } else { &fx.b },
            n as i32,
            0,
            1,
            1,
            o,
        )),
        c: AG_OP("3, (1, 2, 7), (4, 1, 3), (4), ag_conv1d(c, t[0], t[1], &t[2], 1, 1, 2, 2, out)"),
    }
    ag_max_pool2d {
        fuzz: MAX_POOL2D,
        null: call(ag_max_pool2d(n, p, 2, 2, 2, 2, 0, 0, false, &mut o)),
        contract: call(ag_max_pool2d(ctx, t, 2, 2, n as i32, 1, 0, 0, a.null, o)),
        c: AG_OP("1, (1, 2, 5, 5), (1), (1), ag_max_pool2d(c, t[0], 3, 3, 2, 2, 1, 1, true, out)"),
    }
    ag_avg_pool2d {
        fuzz: AVG_POOL2D,
        null: call(ag_avg_pool2d(n, p, 2, 2, 2, 2, 0, 0, false, true, &mut o)),
        contract: call(ag_avg_pool2d(ctx, t, 2, 2, n as i32, 1, 0, 0, a.null, true, o)),
        c: AG_OP("1, (1, 2, 5, 5), (1), (1), ag_avg_pool2d(c, t[0], 3, 3, 2, 2, 1, 1, true, false, out)"),
    }
    ag_global_avg_pool2d {
        fuzz: GLOBAL_AVG_POOL2D => unary,
        null: call(ag_global_avg_pool2d(n, p, &mut o)),
        contract: call(ag_global_avg_pool2d(ctx, t, o)),
        c: AG_OP("1, (2, 3, 2, 2), (1), (1), ag_global_avg_pool2d(c, t[0], out)"),
    }

    // src/ffi/params.rs
    ag_param_new_named {
        fuzz: PARAM_NEW_NAMED,
        null: call(ag_param_new_named(n, c"w".as_ptr(), shape.as_ptr(), 2, data.as_ptr(), &mut o)),
        contract: call({
            // n == 2: the name of the fixture's second parameter.
            let name = if n == 2 { c"param.1" } else { c"named" };
            let np = if a.null { null() } else { name.as_ptr() };
            ag_param_new_named(ctx, np, shape.as_ptr(), n, p(f.as_ptr()), o)
        }),
    }
    ag_param_count {
        fuzz: PARAM_LIST,
        null: call(ag_param_count(n, &mut numel)),
        contract: call(ag_param_count(ctx, if a.null { null_mut() } else { &mut one })),
    }
    ag_param_at {
        fuzz: PARAM_LIST,
        null: call(ag_param_at(n, 0, &mut o)),
        contract: call(ag_param_at(ctx, n, o)),
    }
    ag_param_name {
        fuzz: PARAM_LIST,
        null: call(ag_param_name(n, p, name.as_mut_ptr(), name.len(), &mut numel)),
        contract: call({
            let mut name = [0 as std::ffi::c_char; BUF];
            let np = if a.null {
                null_mut()
            } else {
                name.as_mut_ptr()
            };
            ag_param_name(ctx, t, np, n.min(BUF), &mut one)
        }),
        c: AG_HANDLE_FN("1, AG_NEED_PARAM, true, (2, 3), ag_param_name(c, t[0], s->name, sizeof s->name, AG_OUT(&s->numel))"),
    }
    ag_safetensors_save {
        fuzz: SAFETENSORS_SAVE_LOAD,
        null: call(ag_safetensors_save(n, path.as_ptr())),
        contract: call({
            let sp = CString::new(
                env.dir
                    .join(if a.null { "missing/x.st" } else { "x.st" })
                    .to_str()
                    .unwrap(),
            )
            .unwrap();
            let sp = if n == 0 { null() } else { sp.as_ptr() };
            ag_safetensors_save(ctx, sp)
        }),
    }
    ag_safetensors_load {
        fuzz: SAFETENSORS_SAVE_LOAD,
        null: call(ag_safetensors_load(n, path.as_ptr())),
        contract: call({
            let sp = CString::new(
                env.dir
                    .join(if a.null { "missing/x.st" } else { "x.st" })
                    .to_str()
                    .unwrap(),
            )
            .unwrap();
            let sp = if n == 0 { null() } else { sp.as_ptr() };
            ag_safetensors_load(ctx, sp)
        }),
    }
    ag_safetensors_load_index {
        fuzz: SAFETENSORS_LOAD_INDEX,
        null: call(ag_safetensors_load_index(n, path.as_ptr())),
        contract: call({
            let sp = CString::new(
                env.dir
                    .join(if a.null { "missing/x.json" } else { "x.json" })
                    .to_str()
                    .unwrap(),
            )
            .unwrap();
            let sp = if n == 0 { null() } else { sp.as_ptr() };
            ag_safetensors_load_index(ctx, sp)
        }),
    }
    ag_param_set_weight_decay {
        fuzz: PARAM_SET_WEIGHT_DECAY,
        null: call(ag_param_set_weight_decay(n, p, false)),
        contract: call(ag_param_set_weight_decay(ctx, t, a.null)),
        c: AG_HANDLE_FN("1, AG_NEED_PARAM, false, (2, 3), ag_param_set_weight_decay(c, t[0], true)"),
    }

    // src/ffi/recompute.rs
    ag_set_recompute {
        fuzz: SET_RECOMPUTE,
        null: call(ag_set_recompute(n, AG_RECOMPUTE_ALL)),
        contract: call(ag_set_recompute(ctx, n.min(u32::MAX as usize) as u32)),
    }
    ag_context_set_recompute {
        fuzz: none("deprecated alias: its new name's id covers it"),
        null: call(ag_context_set_recompute(n, AG_RECOMPUTE_ALL)),
        contract: call({
            ag_context_set_recompute(ctx, n.min(u32::MAX as usize) as u32)
        }),
    }
    ag_segment_begin {
        fuzz: SEGMENT_BEGIN,
        null: call(ag_segment_begin(n)),
        contract: call(ag_segment_begin(ctx)),
    }
    ag_segment_end {
        fuzz: SEGMENT_END,
        null: call(ag_segment_end(n, p)),
        contract: call({
            // n == 0: no segment open; else one is opened first (it stays
            // open when ending it fails).
            if n != 0 {
                ag_segment_begin(ctx);
            }
            ag_segment_end(ctx, t)
        }),
        c: AG_HANDLE_FN("1, AG_NEED_ANY, false, (2, 3), (ag_segment_begin(c), ag_segment_end(c, t[0]))"),
    }

    // src/ffi/runtime.rs
    ag_runtime_info {
        fuzz: RUNTIME_INFO,
        null: call(ag_runtime_info(n, &mut ag_runtime::default())),
        contract: call({
            let mut r = arenagrad::ffi::ag_runtime::default();
            ag_runtime_info(ctx, if a.null { null_mut() } else { &mut r })
        }),
    }
    ag_set_num_threads {
        fuzz: THREADS,
        null: none("takes no context: the thread count is per process"),
        contract: none("takes no context first: tested on its own"),
    }
    ag_thread_info_get {
        fuzz: THREADS,
        null: none("takes no context: the thread count is per process"),
        contract: none("takes no context first: tested on its own"),
    }

    // src/ffi/shard.rs
    ag_optimizer_shard {
        fuzz: OPTIMIZER_SHARD,
        null: call(ag_optimizer_shard(n, 0, 0)),
        contract: call(ag_optimizer_shard(ctx, a.handle, n)),
    }
    ag_params_copy_out {
        fuzz: PARAMS_COPY,
        null: call(ag_params_copy_out(n, 0, std::ptr::null_mut(), 0)),
        contract: call(ag_params_copy_out(ctx, a.handle, pm(f.as_mut_ptr()), n)),
    }
    ag_params_copy_in {
        fuzz: PARAMS_COPY,
        null: call(ag_params_copy_in(n, 0, std::ptr::null(), 0)),
        contract: call(ag_params_copy_in(ctx, a.handle, p(f.as_ptr()), n)),
    }
    ag_optimizer_state_copy_out {
        fuzz: OPTIMIZER_STATE,
        null: call(ag_optimizer_state_copy_out(n, 0, 0, std::ptr::null_mut(), 0)),
        contract: call({
            ag_optimizer_state_copy_out(ctx, a.handle as u32 % 3, a.handle, pm(f.as_mut_ptr()), n)
        }),
    }
    ag_optimizer_state_copy_in {
        fuzz: OPTIMIZER_STATE,
        null: call(ag_optimizer_state_copy_in(n, 0, 0, std::ptr::null(), 0)),
        contract: call({
            ag_optimizer_state_copy_in(ctx, a.handle as u32 % 3, a.handle, p(f.as_ptr()), n)
        }),
    }

    // src/ffi/tokenizer.rs
    ag_tokenizer_open {
        fuzz: TOKENIZER_OPEN,
        null: none("makes a tokenizer: NULL out-pointer or path gives NULL_ARGUMENT"),
        contract: none("takes no context first: tested on its own in tests/tokenizer.rs"),
    }
    ag_tokenizer_close {
        fuzz: TOKENIZER_CLOSE,
        null: none("closing NULL, or through a NULL pointer, does nothing"),
        contract: none("takes no context first: tested on its own in tests/tokenizer.rs"),
    }
    ag_tokenizer_encode {
        fuzz: TOKENIZER_ENCODE,
        null: none("takes a tokenizer, not a context: tests/tokenizer.rs checks its NULLs"),
        contract: none("takes no context first: tested on its own in tests/tokenizer.rs"),
    }
    ag_tokenizer_decode {
        fuzz: TOKENIZER_DECODE,
        null: none("takes a tokenizer, not a context: tests/tokenizer.rs checks its NULLs"),
        contract: none("takes no context first: tested on its own in tests/tokenizer.rs"),
    }
    ag_tokenizer_vocab_size {
        fuzz: TOKENIZER_INFO,
        null: none("takes a tokenizer, not a context: tests/tokenizer.rs checks its NULLs"),
        contract: none("takes no context first: tested on its own in tests/tokenizer.rs"),
    }
    ag_tokenizer_end_of_text {
        fuzz: TOKENIZER_INFO,
        null: none("takes a tokenizer, not a context: tests/tokenizer.rs checks its NULLs"),
        contract: none("takes no context first: tested on its own in tests/tokenizer.rs"),
    }
    ag_tokenizer_last_error {
        fuzz: TOKENIZER_INFO,
        null: none("takes no argument: returns the message of this thread's last failure"),
        contract: none("takes no context first: tested on its own in tests/tokenizer.rs"),
    }

    // src/ffi/sampler.rs
    ag_nuts_config_default {
        fuzz: SAMPLER_RUN,
        null: none("fills a config: a NULL out-pointer gives NULL_ARGUMENT"),
        contract: none("takes no context first: tested on its own in tests/sampler.rs"),
    }
    ag_sampler_new {
        fuzz: SAMPLER_RUN,
        null: none("makes a sampler: NULL model or out gives NULL_ARGUMENT"),
        contract: none("takes no context first: tested on its own in tests/sampler.rs"),
    }
    ag_sampler_free {
        fuzz: SAMPLER_RUN,
        null: none("freeing NULL does nothing"),
        contract: none("takes no context first: tested on its own in tests/sampler.rs"),
    }
    ag_sampler_cancel {
        fuzz: SAMPLER_CANCEL,
        null: none("cancelling NULL does nothing"),
        contract: none("takes no context first: tested on its own in tests/sampler.rs"),
    }
    ag_sampler_last_error {
        fuzz: SAMPLER_RUN,
        null: none("takes no argument: returns the message of this thread's last failure"),
        contract: none("takes no context first: tested on its own in tests/sampler.rs"),
    }
    ag_nuts_run {
        fuzz: SAMPLER_RUN,
        null: none("takes a sampler, not a context: tests/sampler.rs checks its NULLs"),
        contract: none("takes no context first: tested on its own in tests/sampler.rs"),
    }
    ag_draws_info {
        fuzz: SAMPLER_RUN,
        null: none("takes draws, not a context: tests/sampler.rs checks its NULLs"),
        contract: none("takes no context first: tested on its own in tests/sampler.rs"),
    }
    ag_draws_chain {
        fuzz: SAMPLER_RUN,
        null: none("takes draws, not a context: tests/sampler.rs checks its NULLs"),
        contract: none("takes no context first: tested on its own in tests/sampler.rs"),
    }
    ag_draws_summary {
        fuzz: SAMPLER_RUN,
        null: none("takes draws, not a context: tests/sampler.rs checks its NULLs"),
        contract: none("takes no context first: tested on its own in tests/sampler.rs"),
    }
    ag_draws_summary_reported {
        fuzz: SAMPLER_REPORTED,
        null: none("takes draws, not a context: tests/sampler.rs checks its NULLs"),
        contract: none("takes no context first: tested on its own in tests/sampler.rs"),
    }
    ag_draws_free {
        fuzz: SAMPLER_RUN,
        null: none("freeing NULL does nothing"),
        contract: none("takes no context first: tested on its own in tests/sampler.rs"),
    }
    ag_advi_config_default {
        fuzz: ADVI_RUN,
        null: none("fills a config: a NULL out-pointer gives NULL_ARGUMENT"),
        contract: none("takes no context first: tested on its own in tests/advi.rs"),
    }
    ag_advi_run {
        fuzz: ADVI_RUN,
        null: none("takes a sampler, not a context: tests/advi.rs checks its NULLs"),
        contract: none("takes no context first: tested on its own in tests/advi.rs"),
    }
    ag_draws_advi {
        fuzz: ADVI_RUN,
        null: none("takes draws, not a context: tests/advi.rs checks its NULLs"),
        contract: none("takes no context first: tested on its own in tests/advi.rs"),
    }

    // src/ffi/test_hooks.rs
    #[cfg(feature = "test-hooks")]
    ag_test_panic {
        fuzz: none("test hook, not in the public header that ids::FUNCTIONS covers"),
        null: call(ag_test_panic(n)),
        contract: none("test hook, outside the catalogue: called directly by the tests"),
    }
    #[cfg(feature = "test-hooks")]
    ag_test_fail_allocation {
        fuzz: none("test hook, not in the public header that ids::FUNCTIONS covers"),
        null: call(ag_test_fail_allocation(n, 1, false, null_mut())),
        contract: none("test hook, outside the catalogue: prepare() uses it"),
    }
}
