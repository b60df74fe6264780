//! The context: persistent parameters, the per-iteration arena, the tensor
//! table and the tape, and the safe Rust API over them.
//!
//! This file holds the context's fields, its lifecycle (new, reset), its
//! settings (grad mode, training mode, arena cap, worker thread) and its
//! memory figures. Only this file and `access` (the narrow interface the
//! rest of the crate, the other rooms included, uses) touch the fields.
//! The rooms: `table` (rows and the tape), `handles` (making and checking
//! handles), `read` (values and gradients for the caller), `capture` and
//! `replay_program` (captured steps), `segments` (recomputation segments),
//! `buffers` (batch norm statistics); `entry`, `stats` and `capture::state`
//! are plain records the context holds and that import no Context.

use crate::arena::Storage;
use crate::buffers::BufferRegistry;
use crate::grad_ready::GradReady;
use crate::optim::Optimizer;
use crate::params::ParamRegistry;
use crate::plan::GradPlan;
use crate::pool::Pool;
use crate::recompute::Recompute;
use crate::tape::Node;
use std::sync::atomic::{AtomicU32, Ordering};

mod access;
mod buffers;
mod capture;
mod clip;
mod entry;
mod grad_ready;
mod handles;
mod optim;
mod params;
mod read;
mod replay_program;
mod segments;
mod stats;
mod table;

pub use stats::MemoryStats;

pub(crate) use entry::TensorEntry;
pub(crate) use replay_program::{EagerOps, OneKernels};

/// A tensor handle: a small value, never a pointer. Activation handles carry
/// the generation (iteration) they were made in and die at the next reset;
/// parameter handles have generation 0 and live as long as the context.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tensor {
    /// Slot in the context's tensor table.
    pub index: u32,
    /// Id of the context that made the handle.
    pub context: u32,
    /// Iteration generation; 0 for parameters.
    pub generation: u64,
}

/// A captured step's handle: a small value, like a tensor handle.
/// `generation` is the step's epoch, unique within its context.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Step {
    /// Slot in the context's step list.
    pub index: u32,
    /// Id of the context that captured the step.
    pub context: u32,
    /// The epoch the step was captured under.
    pub generation: u64,
}

/// A handle to one set of batch normalisation running statistics: its
/// index in creation order and the context that made it. Lives as long as
/// the context, like a parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BatchNormStats {
    pub index: u32,
    pub context: u32,
}

static NEXT_CONTEXT_ID: AtomicU32 = AtomicU32::new(1);

fn next_context_id() -> u32 {
    loop {
        // Ids wrap after 2^32 contexts; 0 is never used so a zeroed handle
        // never matches a context.
        let id = NEXT_CONTEXT_ID.fetch_add(1, Ordering::Relaxed);
        if id != 0 {
            return id;
        }
    }
}

/// Owns everything a training loop needs. See the crate docs for the
/// iteration protocol (ops, backward, optimizer step, reset).
pub struct Context {
    id: u32,
    store: Storage,
    table: Vec<TensorEntry>,
    tape: Vec<Node>,
    /// Table rows 0..n_params are the parameters, in creation order.
    n_params: usize,
    /// Their names and weight-decay flags.
    registry: ParamRegistry,
    grad_enabled: bool,
    /// Running statistics (batch norm's buffers).
    buffers: BufferRegistry,
    /// Training mode (batch statistics, running statistics updated) or
    /// evaluation mode; and whether a recomputed segment is replaying its
    /// forward (which must not update the running statistics again).
    training: bool,
    recomputing: bool,
    backward_done: bool,
    /// Parameter gradients hold values not yet consumed by an optimizer step.
    pending_grads: bool,
    /// clip_grad_norm has proved the current gradients finite, so the
    /// optimizer step can skip its own pass over them.
    grads_checked_finite: bool,
    resets: u64,
    optimizer: Option<Optimizer>,
    /// Offsets of activation gradients in backward's region, cached while
    /// the graph repeats.
    plan: GradPlan,
    /// The process's pool, when the last kernel that asked could use it.
    pool: Option<Pool>,
    /// Every kernel on the calling thread (a test hook sets it).
    single_thread: bool,
    /// Recomputation segments, policy and measurements.
    recompute: Recompute,
    /// The gradient-ready callback and its buckets.
    grad_ready: GradReady,
    /// The float range the next optimizer keeps state for (None: all).
    pending_shard: Option<(usize, usize)>,
    /// Captured steps, an open capture, and input slots.
    capture: capture::state::Captures,
}

impl Default for Context {
    fn default() -> Self {
        Self::new()
    }
}

impl Context {
    pub fn new() -> Context {
        // CPU feature detection (and its allocation) happens here, not in a step.
        crate::simd::detected();
        // With the trace feature, AG_TRACE_OPS makes the first context
        // record op times; ag_context_free prints them.
        #[cfg(feature = "trace")]
        {
            static ONCE: std::sync::Once = std::sync::Once::new();
            if std::env::var_os("AG_TRACE_OPS").is_some() {
                ONCE.call_once(crate::trace::start_ops_only);
            }
        }
        Context {
            id: next_context_id(),
            store: Storage::new(),
            table: Vec::new(),
            tape: Vec::new(),
            n_params: 0,
            registry: ParamRegistry::default(),
            grad_enabled: true,
            buffers: BufferRegistry::default(),
            training: true,
            recomputing: false,
            backward_done: false,
            pending_grads: false,
            grads_checked_finite: false,
            resets: 0,
            optimizer: None,
            plan: GradPlan::default(),
            pool: None,
            // AG_NUM_THREADS=1: never start the worker.
            single_thread: false,
            recompute: Default::default(),
            grad_ready: GradReady::default(),
            pending_shard: None,
            capture: Default::default(),
        }
        .with_single_threaded_blas()
    }

    /// OpenBLAS's own threads would compete with the pool's worker for the
    /// same cores (measured: busy-waiting pools turn 1 ms steps into 3+ ms),
    /// so BLAS runs on the calling thread and arenagrad splits large
    /// products across its worker itself.
    fn with_single_threaded_blas(self) -> Context {
        crate::blas::set_blas_threads(1);
        self
    }

    #[inline]
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The current activation generation (changes at every reset).
    #[inline]
    pub fn generation(&self) -> u64 {
        self.store.epoch()
    }

    /// Ends the iteration: forgets the tape and every activation (their
    /// handles become stale), recycles the arena. Parameters, their
    /// gradients and optimizer state are untouched. Never allocates once the
    /// arena has grown to the iteration's high-water mark.
    pub fn reset(&mut self) {
        self.abandon_capture();
        if self.park_resident() {
            self.resets += 1;
            return;
        }
        let (used, scratch) = (self.store.stats().used, self.store.scratch_bytes());
        self.recompute
            .end_iteration(self.backward_done, used, scratch);
        self.tape.clear();
        self.table.truncate(self.n_params);
        self.store.reset();
        self.capture.clear_inputs();
        self.backward_done = false;
        self.resets += 1;
    }

    /// Turns recording on or off. With grad mode off ops still compute but
    /// nothing is recorded and no output requires a gradient.
    pub fn set_grad_enabled(&mut self, enabled: bool) {
        self.grad_enabled = enabled;
    }

    #[inline]
    pub fn grad_enabled(&self) -> bool {
        self.grad_enabled
    }

    /// Training mode (the default) or evaluation mode, apart from grad
    /// mode. It changes what `batch_norm` does: in training it normalises
    /// with the batch's statistics and updates the running statistics; in
    /// evaluation it normalises with the running statistics and leaves them
    /// alone. Every other op ignores it.
    pub fn set_training(&mut self, training: bool) {
        self.training = training;
    }

    pub fn training(&self) -> bool {
        self.training
    }

    /// Caps the arena at `limit` bytes (None: no cap). An op that would pass
    /// the cap fails with [`Error::OutOfMemory`](crate::Error::OutOfMemory) and changes nothing.
    pub fn set_arena_limit(&mut self, limit: Option<usize>) {
        self.store.set_limit(limit);
    }

    /// Number of parameters (in creation order, indices 0..count).
    #[inline]
    pub fn param_count(&self) -> usize {
        self.n_params
    }

    pub(crate) fn registry(&self) -> &ParamRegistry {
        &self.registry
    }

    pub(crate) fn registry_mut(&mut self) -> &mut ParamRegistry {
        &mut self.registry
    }

    /// The context's memory figures, read without changing anything.
    pub fn memory_stats(&self) -> MemoryStats {
        let a = self.store.stats();
        let r = self.recompute_stats();
        let opt = self.optimizer.as_ref().map_or(0, |o| o.state_bytes());
        MemoryStats {
            arena_used_bytes: a.used as u64,
            arena_reserved_bytes: a.reserved as u64,
            arena_high_water_bytes: a.high_water as u64,
            arena_limit_bytes: a.limit as u64,
            tape_len: self.tape.len() as u64,
            tape_capacity: self.tape.capacity() as u64,
            live_tensors: self.table.len() as u64,
            table_capacity: self.table.capacity() as u64,
            param_count: self.n_params as u64,
            param_bytes: (self.store.persistent_bytes() - opt) as u64,
            optimizer_bytes: opt as u64,
            resets: self.resets,
            generation: self.generation(),
            segments: r.segments as u64,
            recomputed_segments: r.recomputed as u64,
            recompute_saved_bytes: r.saved as u64,
            arena_need_none_bytes: r.need_none as u64,
            arena_need_all_bytes: r.need_all as u64,
        }
    }

    /// Whether the process's pool should run a kernel of `work`
    /// (multiply-adds, or element operations weighted by their cost): the
    /// work pays for a hand-off and the thread count, read now so that a
    /// change between kernels takes effect, is above one.
    pub(crate) fn want_pool(&mut self, work: usize) -> bool {
        if !Self::worth_two_threads(work) || self.single_thread || cfg!(miri) {
            return false;
        }
        self.pool = crate::pool::Pool::new();
        self.pool.is_some()
    }

    /// Whether `work` is enough to split across the pool (whether or not
    /// a pool runs): kernels whose bits depend on a split decide by this.
    pub(crate) fn worth_two_threads(work: usize) -> bool {
        work >= 1 << 21
    }

    /// Test hook (allocation-failure tests; `test-hooks` feature): make the `fail_at`-th fallible
    /// persistent allocation from now on fail with AllocationFailed (and, if
    /// `sticky`, every later one too); 0 turns injection off. Persistent
    /// allocations are parameters, gradients, optimizer state and checkpoint
    /// buffers. Returns how many were counted since the previous call.
    #[cfg(feature = "test-hooks")]
    pub fn inject_allocation_failure(&mut self, fail_at: u64, sticky: bool) -> u64 {
        let counted = self.store.fault.count;
        self.store.fault = crate::arena::FaultInjection {
            count: 0,
            fail_at,
            sticky,
        };
        counted
    }

    /// Test hook: start the generation counter near its limit
    /// (`test-hooks` feature).
    #[cfg(feature = "test-hooks")]
    pub fn set_generation_for_test(&mut self, generation: u64) {
        self.store.set_epoch_for_test(generation);
    }

    /// Test hook: keep every kernel on the calling thread (true) or let
    /// large ones use the worker thread (false, the default).
    #[cfg(feature = "test-hooks")]
    pub fn set_single_thread_for_test(&mut self, single: bool) {
        self.single_thread = single;
        if single {
            self.pool = None;
        }
    }

    /// Every kernel on the calling thread (true) or not (tests).
    #[cfg(test)]
    pub(crate) fn keep_on_one_thread(&mut self, single: bool) {
        self.single_thread = single;
        self.pool = None;
    }
}
