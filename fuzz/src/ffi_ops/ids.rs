//! The `ffi_ops` alphabet: the first byte of every call in an input is one
//! of these ids and names the C function (or the short scenario) to run;
//! the bytes after it are that call's arguments.
//!
//! An id keeps its meaning forever, because the committed corpus
//! (`fuzz/corpus/ffi_ops`) is written in it: a new function gets an unused
//! id (ops continue at 0x36), an id is never reused or renumbered. Ids are
//! grouped by API area, with room in each group. Every byte names a call
//! ([`decode`]): a byte that is an id means that id, any other byte means
//! the id at (byte mod the number of ids) in [`ALL`], so random bytes never
//! go to waste.
//!
//! [`FUNCTIONS`] says which id reaches each C function of the header: it
//! is generated from the `fuzz:` cells of tests/common/c_functions.rs, as
//! are the arms of `FfiOps::call` for the calls of a standard shape.

/// Defines each id as a constant, and [`ALL`] from the same list.
macro_rules! ids {
    ($($(#[$doc:meta])* $name:ident = $value:expr;)*) => {
        $($(#[$doc])* pub const $name: u8 = $value;)*
        /// Every id with its name.
        pub const ALL: &[(u8, &str)] = &[$(($name, stringify!($name))),*];
    };
}

ids! {
    // Parameters and tensors (tensors.rs).
    PARAM_NEW = 0x00;
    TENSOR_NEW = 0x01;
    PARAM_WRITE = 0x02;
    TENSOR_READ = 0x03;
    TENSOR_READ_GRAD = 0x04;
    TENSOR_ITEM = 0x05;
    TENSOR_SHAPE = 0x06;
    TENSOR_NUMEL = 0x07;

    // Ops (ops.rs).
    ADD = 0x10;
    SUB = 0x11;
    MUL = 0x12;
    DIV = 0x13;
    NEG = 0x14;
    EXP = 0x15;
    LOG = 0x16;
    TANH = 0x17;
    RELU = 0x18;
    SIGMOID = 0x19;
    GELU = 0x1a;
    SUM = 0x1b;
    MEAN = 0x1c;
    SCALE = 0x1d;
    SUM_AXIS = 0x1e;
    MEAN_AXIS = 0x1f;
    RESHAPE = 0x20;
    PERMUTE = 0x21;
    TRANSPOSE = 0x22;
    MATMUL = 0x23;
    BMM = 0x24;
    LINEAR = 0x25;
    EMBEDDING = 0x26;
    CROSS_ENTROPY = 0x27;
    LAYERNORM = 0x28;
    SOFTMAX = 0x29;
    ATTENTION = 0x2a;
    SQRT = 0x2b;
    POW = 0x2c;
    ABS = 0x2d;
    MAXIMUM = 0x2e;
    MINIMUM = 0x2f;
    CLAMP = 0x30;
    LOG_SOFTMAX = 0x31;
    MSE_LOSS = 0x32;
    CONCAT = 0x33;
    SLICE = 0x34;
    DROPOUT = 0x35;

    // Training: backward, iterations, optimizers, memory (training.rs).
    BACKWARD = 0x40;
    ZERO_GRAD = 0x41;
    RESET = 0x42;
    SET_GRAD_ENABLED = 0x43;
    MEMORY_STATS = 0x44;
    SET_ARENA_LIMIT = 0x45;
    OPTIMIZER_SGD = 0x46;
    OPTIMIZER_ADAMW = 0x47;
    OPTIMIZER_SET_LR = 0x48;
    OPTIMIZER_STEP = 0x49;
    CLIP_GRAD_NORM = 0x4a;
    FAIL_ALLOCATION = 0x4b;

    // Checkpoints (lifecycle.rs).
    CHECKPOINT_LOAD_BYTES = 0x50;
    /// Save to a chosen path, load it back, peek at it (from the path and
    /// from its bytes in memory).
    CHECKPOINT_SAVE_LOAD_PEEK = 0x51;

    /// The gradient block: length, copy out, copy in, pointer (training.rs).
    GRADS_BLOCK = 0x52;

    // More ops (ops.rs).
    LOG1P = 0x53;

    // A model's set-up and files, segments (model.rs).
    PARAM_NEW_NAMED = 0x54;
    /// ag_param_count, ag_param_at, ag_param_name.
    PARAM_LIST = 0x55;
    PARAM_INIT = 0x56;
    PARAM_SET_WEIGHT_DECAY = 0x57;
    /// ag_safetensors_save, then ag_safetensors_load into either context.
    SAFETENSORS_SAVE_LOAD = 0x58;
    SET_RECOMPUTE = 0x59;
    SEGMENT_BEGIN = 0x5a;
    SEGMENT_END = 0x5b;
    TENSOR_RETAIN_GRAD = 0x5c;

    // Contexts and statuses (lifecycle.rs).
    /// Free context 1 (then a double free through a copy of the pointer).
    CONTEXT_FREE = 0x60;
    /// Make context 1 again if it was freed.
    CONTEXT_NEW = 0x61;
    /// ag_context_free(NULL), through a NULL variable, ag_context_new(NULL).
    CONTEXT_NULLS = 0x62;
    /// ag_status_str of any value, ag_version.
    STATUS_STR = 0x63;
    LAST_ERROR = 0x64;
    /// Calls through a pointer to real memory that is not a context.
    FORGED_CONTEXT = 0x65;
    /// ag_runtime_info, with a NULL `out` or a real one.
    RUNTIME_INFO = 0x66;

    // The special functions (ops.rs).
    LGAMMA = 0x68;
    DIGAMMA = 0x69;
    EXPM1 = 0x6a;
    SOFTPLUS = 0x6b;
    LOG_SIGMOID = 0x6c;
    ERF = 0x6d;
    NORMAL_CDF = 0x6e;
    NORMAL_LCDF = 0x6f;
    LOGSUMEXP_AXIS = 0x70;
    WHERE = 0x71;

    // Capture and replay (capture.rs).
    /// ag_capture_begin .. ag_capture_end, replays, ag_step_free.
    CAPTURE_REPLAY = 0x80;
    /// ag_replay and ag_step_free with a forged step handle.
    STEP_FORGED = 0x81;
    /// ag_input_new [4] and ag_seed_write of a value from the input (or
    /// ag_seed_write on a fuzzed handle), then ag_dropout_seeded of a fuzzed
    /// x and p with that seed (or a fuzzed seed handle).
    DROPOUT_SEEDED = 0x82;
    /// A captured step with ag_dropout_seeded: replays that keep the seed
    /// keep the loss bits, a new seed and back gives them again.
    SEEDED_CAPTURE = 0x83;

    // Data-parallel training (training.rs).
    /// ag_set_grad_ready_callback: set (bucket size from the input) or
    /// remove; later backward calls report through it.
    GRAD_READY = 0x90;
    /// ag_optimizer_shard on the target with a range past its parameters
    /// (or after its optimizer); a sharded AdamW on a context of its own,
    /// checked against an unsharded one.
    OPTIMIZER_SHARD = 0x91;
    /// ag_params_copy_out of a range from the input, then ag_params_copy_in
    /// of the same floats (the parameters do not change).
    PARAMS_COPY = 0x92;
    /// ag_optimizer_state_copy_out of a moment and range from the input,
    /// ag_optimizer_state_copy_in of the same floats, then
    /// ag_checkpoint_save_gathered of the target's moments (or a wrong
    /// count).
    OPTIMIZER_STATE = 0x93;

    // Threads (runtime.rs).
    /// ag_set_num_threads with a count from the input (0 to 8, or past
    /// AG_MAX_THREADS: refused), then ag_thread_info_get with a struct size
    /// from the input (or a NULL pointer); the count goes back to the
    /// default at the end.
    THREADS = 0xA0;

    // The tokenizer (tokenizer.rs), over a small vocabulary the harness
    // writes, or a broken one.
    /// ag_tokenizer_open of the small vocabulary, of a file cut short or
    /// missing, or with NULL arguments.
    TOKENIZER_OPEN = 0xB0;
    /// ag_tokenizer_encode of bytes from the input into a buffer whose
    /// capacity the input picks; decoding the ids gives the bytes back.
    TOKENIZER_ENCODE = 0xB1;
    /// ag_tokenizer_decode of ids from the input (in range or not).
    TOKENIZER_DECODE = 0xB2;
    /// ag_tokenizer_close, then a second close through a copy of the pointer.
    TOKENIZER_CLOSE = 0xB3;
    /// ag_tokenizer_vocab_size, ag_tokenizer_end_of_text and
    /// ag_tokenizer_last_error of an open, closed, forged or NULL tokenizer.
    TOKENIZER_INFO = 0xB4;

    // The Llama family's ops (ops/llama.rs), counting down from 0xBF.
    SILU = 0xBF;
    RMSNORM = 0xBE;
    ROPE = 0xBD;
    /// ag_swiglu of two handles (one shape, or not).
    SWIGLU = 0xBC;
    /// ag_attention_gqa of q, k and v handles.
    ATTENTION_GQA = 0xB5;
    /// ag_safetensors_load_index of a sharded copy of a context's own
    /// save (two float32 shards), of an index that disagrees with its
    /// shards in a way the input picks (a shard missing, a tensor in both,
    /// not JSON), or of a bad path.
    SAFETENSORS_LOAD_INDEX = 0xB6;

    // Convolution and pooling (ops.rs).
    /// ag_conv2d of x, w and a bias handle (or none) with the stride,
    /// padding, dilation and groups from the input (some negative or 0).
    CONV2D = 0xC0;
    /// ag_conv1d, as CONV2D.
    CONV1D = 0xC1;
    /// ag_max_pool2d with kernel, stride, padding and ceil mode from the
    /// input.
    MAX_POOL2D = 0xC2;
    /// ag_avg_pool2d, as MAX_POOL2D, with count_include_pad.
    AVG_POOL2D = 0xC3;
    GLOBAL_AVG_POOL2D = 0xC4;

    // Normalisation over channels and training mode (norm.rs).
    /// ag_set_training, then ag_is_training.
    SET_TRAINING = 0xC5;
    /// ag_batch_norm_stats_new, then a read and a write of some statistics.
    BATCH_NORM_STATS = 0xC6;
    /// ag_batch_norm with statistics (or none), momentum and eps from the
    /// input.
    BATCH_NORM = 0xC7;
    /// ag_group_norm with a group count and eps from the input.
    GROUP_NORM = 0xC8;
    /// ag_conv2d_relu, as CONV2D.
    CONV2D_RELU = 0xC9;
    /// ag_batch_norm_opt: a byte whose bits pass w (bit 0) and b
    /// (bit 1), else NULL, then BATCH_NORM's input.
    BATCH_NORM_OPT = 0xCC;
    /// ag_group_norm_opt: that byte, then GROUP_NORM's input.
    GROUP_NORM_OPT = 0xCD;

    // Stan's special functions (ops.rs).
    TRIGAMMA = 0xD0;
    LOG1M_EXP = 0xD1;
    LBETA = 0xD2;
    LOG_DIFF_EXP = 0xD3;
    INV_PHI = 0xD4;
    CHOLESKY = 0xD5;
    SOLVE_LOWER = 0xD6;
    LOG_DET_SPD = 0xD7;
    DIAGONAL = 0xD8;
    /// ag_constrain_lower, _upper and _interval: x, then the bounds.
    CONSTRAIN_LOWER = 0xD9;
    CONSTRAIN_UPPER = 0xDA;
    CONSTRAIN_INTERVAL = 0xDB;
    GAMMA_P = 0xDC;
    GAMMA_Q = 0xDD;
    /// ag_beta_inc: three tensors broadcast together, like WHERE.
    BETA_INC = 0xDE;
    LINEAR_RECURRENCE = 0xDF;

    // The NUTS sampler (sampler.rs), on a normal model the harness writes.
    /// ag_nuts_config_default, ag_sampler_new (or a bad spec), ag_nuts_run
    /// with chains, warm-up, draws, parallel and fixed_graph from the input
    /// (or a bad config), ag_draws_info, ag_draws_chain, ag_draws_summary,
    /// the frees (twice) and ag_sampler_last_error.
    SAMPLER_RUN = 0xE0;
    /// ag_sampler_cancel from the progress function after an iteration
    /// count the input picks; the draws so far come back.
    SAMPLER_CANCEL = 0xE1;
    /// ag_advi_config_default, ag_advi_run (mean-field or full-rank, eta
    /// given or adapted, from the input; or a bad config) on the harness's
    /// normal model, the draws read back, ag_draws_advi on them and on
    /// NUTS draws (refused); a cancel from the progress function.
    ADVI_RUN = 0xE2;
    /// A model reporting exp of its position (or failing to, past a bound
    /// the input picks): ag_nuts_run or ag_advi_run, the reported values
    /// against the positions, ag_draws_summary_reported (and a wrong n).
    SAMPLER_REPORTED = 0xE3;
    /// ag_constrain_cholesky_corr: x (K (K - 1) / 2 elements or not).
    CONSTRAIN_CHOLESKY_CORR = 0xE4;
    /// ag_normal_id_glm_lpdf: five handles, X transposed or not.
    NORMAL_ID_GLM = 0xE5;
    /// ag_bernoulli_logit_glm_lpmf: four handles, X transposed or not.
    BERNOULLI_LOGIT_GLM = 0xE6;
    /// ag_lkj_corr_cholesky_lpdf: L (square or not) and eta (any float).
    LKJ_CORR_CHOLESKY = 0xE7;
    /// ag_normal_lpdf: y, mu and sigma (shapes that fit or not).
    NORMAL_LPDF = 0xE8;
}

/// The ids a byte that is no id maps onto, in the order [`ALL`] had when
/// this list was frozen (96 ids). A new id is reached by its own byte
/// only, wherever it is declared, so adding one never changes what an old
/// corpus input does (beyond the byte of the new id itself).
const MAPPED: [u8; 96] = [
    PARAM_NEW,
    TENSOR_NEW,
    PARAM_WRITE,
    TENSOR_READ,
    TENSOR_READ_GRAD,
    TENSOR_ITEM,
    TENSOR_SHAPE,
    TENSOR_NUMEL,
    ADD,
    SUB,
    MUL,
    DIV,
    NEG,
    EXP,
    LOG,
    TANH,
    RELU,
    SIGMOID,
    GELU,
    SUM,
    MEAN,
    SCALE,
    SUM_AXIS,
    MEAN_AXIS,
    RESHAPE,
    PERMUTE,
    TRANSPOSE,
    MATMUL,
    BMM,
    LINEAR,
    EMBEDDING,
    CROSS_ENTROPY,
    LAYERNORM,
    SOFTMAX,
    ATTENTION,
    SQRT,
    POW,
    ABS,
    MAXIMUM,
    MINIMUM,
    CLAMP,
    LOG_SOFTMAX,
    MSE_LOSS,
    CONCAT,
    SLICE,
    DROPOUT,
    BACKWARD,
    ZERO_GRAD,
    RESET,
    SET_GRAD_ENABLED,
    MEMORY_STATS,
    SET_ARENA_LIMIT,
    OPTIMIZER_SGD,
    OPTIMIZER_ADAMW,
    OPTIMIZER_SET_LR,
    OPTIMIZER_STEP,
    CLIP_GRAD_NORM,
    FAIL_ALLOCATION,
    CHECKPOINT_LOAD_BYTES,
    CHECKPOINT_SAVE_LOAD_PEEK,
    GRADS_BLOCK,
    LOG1P,
    PARAM_NEW_NAMED,
    PARAM_LIST,
    PARAM_INIT,
    PARAM_SET_WEIGHT_DECAY,
    SAFETENSORS_SAVE_LOAD,
    SET_RECOMPUTE,
    SEGMENT_BEGIN,
    SEGMENT_END,
    TENSOR_RETAIN_GRAD,
    CONTEXT_FREE,
    CONTEXT_NEW,
    CONTEXT_NULLS,
    STATUS_STR,
    LAST_ERROR,
    FORGED_CONTEXT,
    RUNTIME_INFO,
    LGAMMA,
    DIGAMMA,
    EXPM1,
    SOFTPLUS,
    LOG_SIGMOID,
    ERF,
    NORMAL_CDF,
    NORMAL_LCDF,
    LOGSUMEXP_AXIS,
    WHERE,
    CAPTURE_REPLAY,
    STEP_FORGED,
    DROPOUT_SEEDED,
    SEEDED_CAPTURE,
    GRAD_READY,
    OPTIMIZER_SHARD,
    PARAMS_COPY,
    OPTIMIZER_STATE,
];

/// The call a byte of the input names: itself when it is an id, else the
/// id at (byte mod 96) in [`MAPPED`]. Old corpus inputs keep the meaning of
/// every byte.
pub fn decode(b: u8) -> u8 {
    if ALL.iter().any(|&(id, _)| id == b) {
        b
    } else {
        MAPPED[b as usize % MAPPED.len()]
    }
}

/// A C function of the one table of C functions
/// (tests/common/c_functions.rs) as its `fuzz:` cell states it.
#[derive(Clone, Copy, Debug)]
pub struct Function {
    pub name: &'static str,
    /// The id whose call reaches it; None where the cell is `none("why")`
    /// (deprecated aliases and the `ag_test_*` hooks).
    pub id: Option<u8>,
    /// The harness method (`unary`, `binary`, ...) of a cell `ID => method`,
    /// from which `FfiOps::call` generates the id's arm; None: the id's
    /// arm is written by hand.
    pub arm: Option<&'static str>,
}

/// Every row of the one table of C functions, generated from its `fuzz:`
/// cells (the other cells are dropped unread: they are test code). An id
/// the alphabet does not define does not compile. Rows' `#[cfg]`
/// attributes are dropped too: only `ag_test_*` hooks carry one, and they
/// have no id.
pub const FUNCTIONS: &[Function] = {
    macro_rules! c_functions {
        ($( $(#[$attr:meta])* $name:ident {
            fuzz: $fuzz:ident $(($why:literal))? $(=> $arm:ident)?,
            $($other_cells:tt)*
        })*) => {
            &[$(Function {
                name: stringify!($name),
                id: fuzz_id!($fuzz $(($why))?),
                arm: arm_name!($($arm)?),
            }),*]
        };
    }
    macro_rules! fuzz_id {
        (none($why:literal)) => {
            None
        };
        ($id:ident) => {
            Some($id)
        };
    }
    macro_rules! arm_name {
        () => {
            None
        };
        ($arm:ident) => {
            Some(stringify!($arm))
        };
    }
    include!("../../../tests/common/c_functions.rs")
};
