//! The memory figures a context reports: what its arena, tape, table,
//! parameters and optimizer hold, read without changing anything (the
//! context fills them in `Context::memory_stats`).

/// A context's memory figures (ag_memory_stats in C, Context::memory_stats
/// in Rust).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Arena bytes handed out in the current iteration.
    pub arena_used_bytes: u64,
    /// Bytes the arena holds from the system (its chunks).
    pub arena_reserved_bytes: u64,
    /// Largest `arena_used_bytes` seen in any iteration.
    pub arena_high_water_bytes: u64,
    /// Arena cap in bytes, 0 when unlimited.
    pub arena_limit_bytes: u64,
    /// Ops recorded on the tape this iteration, and the tape's capacity.
    pub tape_len: u64,
    pub tape_capacity: u64,
    /// Live tensors (parameters included) and the table's capacity.
    pub live_tensors: u64,
    pub table_capacity: u64,
    /// Number of parameters and bytes of parameter values plus gradients.
    pub param_count: u64,
    pub param_bytes: u64,
    /// Bytes of optimizer state (moments).
    pub optimizer_bytes: u64,
    /// Resets since the context was created.
    pub resets: u64,
    /// Current activation generation.
    pub generation: u64,
    /// Segments ended this iteration, and how many of them are recomputed.
    pub segments: u64,
    pub recomputed_segments: u64,
    /// Arena bytes recomputation keeps out of this iteration: the buffers
    /// of the recomputed segments less their outputs' copies and the
    /// scratch region they share.
    pub recompute_saved_bytes: u64,
    /// The arena bytes an iteration of this graph needs with no segment
    /// recomputed, and with every segment recomputed (the smallest arena
    /// cap it can train under): from this iteration once its backward ran,
    /// else from the last iteration that reached backward (0 before one).
    pub arena_need_none_bytes: u64,
    pub arena_need_all_bytes: u64,
}
