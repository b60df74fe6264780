//! The `ffi_ops` alphabet: the first byte of every call in an input is one
//! of these ids and names the C function (or the short scenario) to run;
//! the bytes after it are that call's arguments.
//!
//! An id keeps its meaning forever, because the committed corpus
//! (`fuzz/corpus/ffi_ops`) is written in it: a new function gets an unused
//! id (ops continue at 0x36), an id is never reused or renumbered, and a
//! byte that is no id is skipped. Ids are grouped by API area, with room in
//! each group.

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
}
