//! The `ffi_ops` target: an input is a program of up to [`MAX_CALLS`] C API
//! calls over two contexts. Each call starts with an id byte ([`ids`]) that
//! names the function; its arguments are decoded from the bytes after it
//! (`args.rs`). Every call is checked (`check.rs`); at the end both contexts
//! must still run a fixed iteration exactly ([`FfiOps::finish`]).
//!
//! The calls, by API area: `tensors.rs` (parameters, tensors, reads and
//! writes), `ops.rs` (the Llama family's in `llama.rs`), `training.rs`
//! (backward, iterations, optimizers, memory caps), `lifecycle.rs`
//! (checkpoints, contexts), `model.rs` (named parameters, initialisers,
//! safetensors, segments).

mod args;
mod capture;
mod check;
pub mod ids;
mod lifecycle;
mod llama;
mod model;
mod norm;
mod ops;
mod sampler;
mod sharded;
mod tensors;
mod tokenizer;
mod training;

use super::bytes::Bytes;
use super::{RUN, SENTINEL, documented, last_error, status_name, trace};
use arenagrad::MemoryStats;
use arenagrad::ffi::*;
use std::path::PathBuf;
use std::ptr::null_mut;
use std::sync::atomic::Ordering;

/// Largest element count of a tensor the harness creates itself (derived
/// tensors can be bigger: broadcasting, matmul).
pub const MAX_NUMEL: usize = 512;
/// Calls decoded from one input at most.
pub const MAX_CALLS: usize = 256;
/// Parameters per context the harness creates at most.
pub const MAX_PARAMS: usize = 32;
/// Arena cap the harness keeps in force between calls: a fuzzed limit of 0
/// ("no cap") or above this is set, checked, and replaced by this cap, so
/// chains of broadcasts cannot grow an input's memory without bound.
pub const ARENA_CAP: usize = 64 << 20;
/// Handles remembered (valid, stale, from the other context).
const POOL: usize = 64;
/// Capacity of the read buffers (one more than MAX_NUMEL: wrong lengths).
const BUF: usize = MAX_NUMEL + 1;
const MAX_IDS: usize = 64;
/// What a float out-parameter holds before a call that must not write it.
const FILL: f32 = -1234.5;

/// Which context pointer a call gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// A live context of the harness (0 or 1).
    Live(usize),
    Null,
    /// A freed or forged pointer: must be refused with INVALID_CONTEXT.
    Invalid(usize),
}

/// What the harness knows before a call.
struct Pre {
    live: Option<usize>,
    stats: MemoryStats,
    /// Some handle argument is certainly invalid for the target context.
    bad_handle: bool,
}

/// State of one `ffi_ops` run: two contexts, remembered handles, the
/// expected parameter values of context 0.
pub struct FfiOps<'a> {
    input: Bytes<'a>,
    ctx: [*mut ag_context; 2],
    ids: [u32; 2],
    /// Addresses of contexts freed during the run, and forged ones.
    invalid: Vec<usize>,
    pool: Vec<ag_tensor>,
    params0: Vec<(ag_tensor, usize)>,
    expected0: Vec<u32>,
    dir: PathBuf,
    /// Id of the call being run.
    id: u8,
    calls: u64,
    ok: u64,
    by_id: Vec<(u64, u64)>,
    /// Per context: (its id, generation, live tensors) at a segment's begin.
    open: [Option<(u32, u64, u64)>; 2],
    /// Segments ended this run; their tensors but the output are private.
    sealed: Vec<model::Sealed>,
    /// The tokenizer the tokenizer calls use (NULL until one needs it).
    tok: *mut ag_tokenizer,
    /// Tokens of closed tokenizers, and forged ones.
    dead_tokenizers: Vec<usize>,
}

/// What one input did.
pub struct RunStats {
    /// C API calls made.
    pub calls: u64,
    /// C API calls that returned OK.
    pub ok: u64,
    /// Indexed by id: calls decoded, and C API calls under them that
    /// returned OK.
    pub by_id: Vec<(u64, u64)>,
}

/// Runs one `ffi_ops` input. Panics on any broken guarantee.
pub fn run_ffi_ops(data: &[u8]) -> RunStats {
    let mut h = FfiOps::new(data);
    h.run();
    h.finish();
    RunStats {
        calls: h.calls,
        ok: h.ok,
        by_id: h.by_id,
    }
}

fn new_context() -> (*mut ag_context, u32) {
    let mut p: *mut ag_context = null_mut();
    assert_eq!(ag_context_new(&mut p), AG_STATUS_OK);
    assert!(!p.is_null());
    // Learn the context id from a probe handle, then end the iteration.
    let mut t = SENTINEL;
    let shape = [1usize];
    let v = [0.0f32];
    assert_eq!(
        ag_tensor_new(p, shape.as_ptr(), 1, v.as_ptr(), &mut t),
        AG_STATUS_OK
    );
    assert_eq!(ag_reset(p), AG_STATUS_OK);
    assert_eq!(ag_set_arena_limit(p, ARENA_CAP), AG_STATUS_OK);
    (p, t.context)
}

impl<'a> FfiOps<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        let (c0, i0) = new_context();
        let (c1, i1) = new_context();
        let run = RUN.fetch_add(1, Ordering::Relaxed);
        let base = if std::path::Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        };
        let dir = base.join(format!("ag_fuzz_{}_{run}", std::process::id()));
        FfiOps {
            input: Bytes::new(data),
            ctx: [c0, c1],
            ids: [i0, i1],
            // `ag_context *` values are tokens the library looks up, never
            // dereferences; tokens count up from 1, so these are never live.
            invalid: vec![0xd_eadb_eef0, usize::MAX & !7, 1 << 62],
            pool: Vec::new(),
            params0: Vec::new(),
            expected0: Vec::new(),
            dir,
            id: 0,
            calls: 0,
            ok: 0,
            by_id: vec![(0, 0); 256],
            open: [None; 2],
            sealed: Vec::new(),
            tok: null_mut(),
            // Tokenizer tokens are multiples of 64 counting up from 64.
            dead_tokenizers: vec![0xd_eadb_eef0, 1 << 62, 8],
        }
    }

    /// Decodes and runs the calls of the input.
    pub fn run(&mut self) {
        let mut n = 0;
        while !self.input.done() && n < MAX_CALLS {
            n += 1;
            let id = ids::decode(self.input.u8());
            self.id = id;
            self.by_id[id as usize].0 += 1;
            self.call(id);
        }
        // A THREADS call may have set the process's thread count.
        ag_set_num_threads(0);
    }

    /// Runs the call named by `id` (decoded: always an id of the alphabet).
    fn call(&mut self, id: u8) {
        if self.table_arm(id) {
            return;
        }
        match id {
            ids::PARAM_NEW => self.param_new(),
            ids::TENSOR_NEW => self.tensor_new(),
            ids::PARAM_WRITE => self.param_write(),
            ids::TENSOR_READ => self.read(tensors::Read::Values),
            ids::TENSOR_READ_GRAD => self.read(tensors::Read::Grad),
            ids::TENSOR_ITEM => self.read(tensors::Read::Item),
            ids::TENSOR_SHAPE => self.read(tensors::Read::Shape),
            ids::TENSOR_NUMEL => self.read(tensors::Read::Numel),

            ids::SCALE => self.scale(),
            ids::RESHAPE => self.reshape(),
            ids::PERMUTE => self.permute(),
            ids::TRANSPOSE => self.transpose(),
            ids::LINEAR => self.linear(),
            ids::EMBEDDING => self.embedding(),
            ids::CROSS_ENTROPY => self.cross_entropy(),
            ids::LAYERNORM => self.layernorm(),
            ids::SOFTMAX => self.softmax(),
            ids::ATTENTION => self.attention(),
            ids::RMSNORM => self.rmsnorm(),
            ids::ROPE => self.rope(),
            ids::CONSTRAIN_LOWER => self.constrain(0),
            ids::CONSTRAIN_UPPER => self.constrain(1),
            ids::CONSTRAIN_INTERVAL => self.constrain(2),
            ids::CONSTRAIN_CHOLESKY_CORR => self.constrain(3),
            ids::ATTENTION_GQA => self.attention_gqa(),
            ids::POW => self.pow(),
            ids::CLAMP => self.clamp_op(),
            ids::WHERE => self.where_op(),
            ids::BETA_INC => self.beta_inc(),
            ids::NORMAL_ID_GLM => self.normal_id_glm(),
            ids::BERNOULLI_LOGIT_GLM => self.bernoulli_glm(),
            ids::LKJ_CORR_CHOLESKY => self.lkj_corr_cholesky(),
            ids::NORMAL_LPDF => self.normal_lpdf(),
            ids::CONCAT => self.concat(),
            ids::SLICE => self.slice(),
            ids::DROPOUT => self.dropout(),

            ids::BACKWARD => self.backward(),
            ids::ZERO_GRAD => self.zero_grad(),
            ids::RESET => self.reset(),
            ids::SET_GRAD_ENABLED => self.set_grad_enabled(),
            ids::MEMORY_STATS => self.memory_stats(),
            ids::SET_ARENA_LIMIT => self.arena_limit(),
            ids::OPTIMIZER_SGD => self.optimizer_sgd(),
            ids::OPTIMIZER_ADAMW => self.optimizer_adamw(),
            ids::OPTIMIZER_SET_LR => self.optimizer_set_lr(),
            ids::OPTIMIZER_STEP => self.optimizer_step(),
            ids::CLIP_GRAD_NORM => self.clip(),
            ids::FAIL_ALLOCATION => self.fail_allocation(),

            ids::CHECKPOINT_LOAD_BYTES => self.load_bytes(),
            ids::CHECKPOINT_SAVE_LOAD_PEEK => self.save_load_peek(),
            ids::GRADS_BLOCK => self.grads_block(),

            ids::PARAM_NEW_NAMED => self.param_new_named(),
            ids::PARAM_LIST => self.param_list(),
            ids::PARAM_INIT => self.param_init(),
            ids::PARAM_SET_WEIGHT_DECAY => self.param_set_weight_decay(),
            ids::SAFETENSORS_SAVE_LOAD => self.safetensors_save_load(),
            ids::SAFETENSORS_LOAD_INDEX => self.safetensors_load_index(),
            ids::SET_RECOMPUTE => self.set_recompute(),
            ids::SEGMENT_BEGIN => self.segment_begin(),
            ids::SEGMENT_END => self.segment_end(),
            ids::TENSOR_RETAIN_GRAD => self.retain_grad(),

            ids::CONTEXT_FREE => self.context_free(),
            ids::CONTEXT_NEW => self.context_new(),
            ids::CONTEXT_NULLS => self.context_nulls(),
            ids::STATUS_STR => self.status_str(),
            ids::LAST_ERROR => self.last_error_of_any(),
            ids::FORGED_CONTEXT => self.forged_context(),
            ids::RUNTIME_INFO => self.runtime_info(),
            ids::THREADS => self.threads(),

            ids::CONV2D => self.conv(Conv::Plain2d),
            ids::CONV2D_RELU => self.conv(Conv::Relu2d),
            ids::SET_TRAINING => self.set_training(),
            ids::BATCH_NORM_STATS => self.batch_norm_stats(),
            ids::BATCH_NORM => self.batch_norm(),
            ids::GROUP_NORM => self.group_norm(),
            ids::BATCH_NORM_OPT => self.batch_norm_opt(),
            ids::GROUP_NORM_OPT => self.group_norm_opt(),
            ids::CONV1D => self.conv(Conv::Plain1d),
            ids::MAX_POOL2D => self.pool(true),
            ids::AVG_POOL2D => self.pool(false),
            ids::GRAD_READY => self.grad_ready(),
            ids::OPTIMIZER_SHARD => self.optimizer_shard(),
            ids::PARAMS_COPY => self.params_copy(),
            ids::OPTIMIZER_STATE => self.optimizer_state(),
            ids::CAPTURE_REPLAY => self.capture_replay(),
            ids::STEP_FORGED => self.step_forged(),
            ids::DROPOUT_SEEDED => self.dropout_seeded(),
            ids::SEEDED_CAPTURE => self.seeded_capture(),
            ids::TOKENIZER_OPEN => self.tokenizer_open(),
            ids::TOKENIZER_ENCODE => self.tokenizer_encode(),
            ids::TOKENIZER_DECODE => self.tokenizer_decode(),
            ids::TOKENIZER_CLOSE => self.tokenizer_close(),
            ids::TOKENIZER_INFO => self.tokenizer_info(),
            ids::SAMPLER_RUN => self.sampler_run(),
            ids::SAMPLER_CANCEL => self.sampler_cancel(),
            ids::ADVI_RUN => self.advi_run(),
            ids::SAMPLER_REPORTED => self.sampler_reported(),
            _ => panic!(
                "id {id:#04x} has no arm: give its row in tests/common/c_functions.rs \
                 a cell `fuzz: ID => method`, or write its arm here"
            ),
        }
    }

    /// The arms generated from the one table of C functions: a row whose
    /// cell is `fuzz: ID => method` (`unary`, `binary`, `reduce_axis`,
    /// `product`) makes `ids::ID` call `self.method("ag_<name>", ag_<name>)`.
    /// Returns whether `id` had such an arm.
    fn table_arm(&mut self, id: u8) -> bool {
        macro_rules! c_functions {
            ($( $(#[$attr:meta])* $name:ident {
                fuzz: $fuzz:ident $(($why:literal))? $(=> $arm:ident)?,
                $($other_cells:tt)*
            })*) => {{
                $( table_arm!(self, id, $name, $fuzz $(=> $arm)?); )*
                false
            }};
        }
        macro_rules! table_arm {
            ($h:ident, $id:ident, $name:ident, $fuzz:ident => $arm:ident) => {
                if $id == ids::$fuzz {
                    $h.$arm(stringify!($name), $name);
                    return true;
                }
            };
            ($($no_arm:tt)*) => {};
        }
        include!("../../../tests/common/c_functions.rs")
    }

    /// After the input: every live context must still work (a fixed
    /// iteration gives the exact expected value), then both are freed.
    pub fn finish(&mut self) {
        self.tokenizer_finish();
        self.verify_params("by the end of the input");
        for i in 0..2 {
            let c = self.ctx[i];
            if c.is_null() {
                continue;
            }
            assert_eq!(
                ag_test_fail_allocation(c, 0, false, null_mut()),
                AG_STATUS_OK
            );
            assert_eq!(ag_set_arena_limit(c, 0), AG_STATUS_OK);
            assert_eq!(ag_set_grad_enabled(c, true), AG_STATUS_OK);
            assert_eq!(ag_reset(c), AG_STATUS_OK);
            let shape = [2usize];
            let v = [1.5f32, 2.5];
            let mut x = SENTINEL;
            let st = ag_tensor_new(c, shape.as_ptr(), 1, v.as_ptr(), &mut x);
            assert_eq!(st, AG_STATUS_OK, "context {i} unusable: {}", last_error(c));
            let mut s = SENTINEL;
            assert_eq!(ag_sum(c, x, &mut s), AG_STATUS_OK, "{}", last_error(c));
            let mut out = 0.0f32;
            assert_eq!(ag_tensor_item(c, s, &mut out), AG_STATUS_OK);
            assert_eq!(out, 4.0);
            let mut p = c;
            assert_eq!(ag_context_free(&mut p), AG_STATUS_OK);
            self.ctx[i] = null_mut();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Which convolution [`FfiOps::conv`] calls.
#[derive(Clone, Copy)]
enum Conv {
    Plain2d,
    Relu2d,
    Plain1d,
}

/// Convolution and pooling: every scalar comes from [`Bytes::axis`], so
/// small sizes, zero, negatives and extremes all occur.
impl FfiOps<'_> {
    fn conv(&mut self, kind: Conv) {
        let t = self.target();
        let (x, w, bias) = (self.handle(), self.handle(), self.handle());
        let with_bias = self.input.bool();
        let mut v = [0i32; 7];
        v.iter_mut().for_each(|s| *s = self.input.axis());
        let b: *const ag_tensor = if with_bias { &bias } else { std::ptr::null() };
        let inputs: &[ag_tensor] = if with_bias { &[x, w, bias] } else { &[x, w] };
        match kind {
            Conv::Plain2d => self.op("ag_conv2d", t, inputs, |c, o| {
                ag_conv2d(c, x, w, b, v[0], v[1], v[2], v[3], v[4], v[5], v[6], o)
            }),
            Conv::Relu2d => self.op("ag_conv2d_relu", t, inputs, |c, o| {
                ag_conv2d_relu(c, x, w, b, v[0], v[1], v[2], v[3], v[4], v[5], v[6], o)
            }),
            Conv::Plain1d => self.op("ag_conv1d", t, inputs, |c, o| {
                ag_conv1d(c, x, w, b, v[0], v[1], v[2], v[3], o)
            }),
        }
    }

    fn pool(&mut self, max: bool) {
        let t = self.target();
        let x = self.handle();
        let mut v = [0i32; 6];
        v.iter_mut().for_each(|s| *s = self.input.axis());
        let (ceil_mode, include_pad) = (self.input.bool(), self.input.bool());
        if max {
            self.op("ag_max_pool2d", t, &[x], |c, o| {
                ag_max_pool2d(c, x, v[0], v[1], v[2], v[3], v[4], v[5], ceil_mode, o)
            });
        } else {
            self.op("ag_avg_pool2d", t, &[x], |c, o| {
                ag_avg_pool2d(
                    c,
                    x,
                    v[0],
                    v[1],
                    v[2],
                    v[3],
                    v[4],
                    v[5],
                    ceil_mode,
                    include_pad,
                    o,
                )
            });
        }
    }
}
