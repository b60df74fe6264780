//! The context: persistent parameters, the per-iteration arena, the tensor
//! table and the tape, and the safe Rust API over them.

use crate::arena::{Buf, Storage};
use crate::error::{Error, Result};
use crate::grad_ready::GradReady;
use crate::ops::Op;
use crate::optim::Optimizer;
use crate::params::ParamRegistry;
use crate::plan::GradPlan;
use crate::pool::Pool;
use crate::recompute::Recompute;
use crate::shape::Shape;
use crate::tape::Node;
use std::sync::atomic::{AtomicU32, Ordering};

mod access;
mod capture;
mod replay_program;
mod stats;

pub use stats::MemoryStats;

pub use capture::Step;
pub(crate) use replay_program::OneKernels;

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

/// One row of the tensor table (plain data; the buffers live in Storage).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TensorEntry {
    pub shape: Shape,
    pub data: Buf,
    /// Gradient buffer: persistent for parameters; for activations, a slot
    /// of the planned gradient region during backward, kept afterwards only
    /// when `retain` is set.
    pub grad: Option<Buf>,
    pub requires_grad: bool,
    /// The caller asked to keep this activation's gradient past backward.
    pub retain: bool,
    /// For reshape views: the entry whose memory (and gradient) this shares.
    pub view_of: Option<u32>,
    /// Set during backward once a gradient flows into this tensor from the
    /// loss; ops whose output never receives one are skipped (they are not
    /// part of the loss's graph, and 0 * NaN would poison gradients).
    pub flow: bool,
    /// During backward: this tensor's gradient slot is born (its first
    /// write comes next) but still holds whatever the slot held before.
    /// The first access zeroes it, unless the kernel asked to overwrite it
    /// whole ([`Context::grad_to_overwrite`]): then no fill is wasted.
    pub unzeroed: bool,
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
    /// One worker thread for large kernels, started at first need.
    pool: Option<Pool>,
    /// No worker: it could not be started, or AG_NUM_THREADS=1 said so.
    pool_failed: bool,
    /// Recomputation segments, policy and measurements.
    recompute: Recompute,
    /// The gradient-ready callback and its buckets.
    grad_ready: GradReady,
    /// The float range the next optimizer keeps state for (None: all).
    pending_shard: Option<(usize, usize)>,
    /// Captured steps, an open capture, and input slots.
    capture: capture::Captures,
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
        Context {
            id: next_context_id(),
            store: Storage::new(),
            table: Vec::new(),
            tape: Vec::new(),
            n_params: 0,
            registry: ParamRegistry::default(),
            grad_enabled: true,
            backward_done: false,
            pending_grads: false,
            grads_checked_finite: false,
            resets: 0,
            optimizer: None,
            plan: GradPlan::default(),
            pool: None,
            // AG_NUM_THREADS=1: never start the worker.
            pool_failed: crate::pool::disabled_by_env(),
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

    pub fn id(&self) -> u32 {
        self.id
    }

    /// The current activation generation (changes at every reset).
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

    pub fn grad_enabled(&self) -> bool {
        self.grad_enabled
    }

    /// Caps the arena at `limit` bytes (None: no cap). An op that would pass
    /// the cap fails with [`Error::OutOfMemory`] and changes nothing.
    pub fn set_arena_limit(&mut self, limit: Option<usize>) {
        self.store.set_limit(limit);
    }

    /// Number of parameters (in creation order, indices 0..count).
    pub fn param_count(&self) -> usize {
        self.n_params
    }

    /// Appends a parameter row of `shape` (values from `init`, else zeros)
    /// with its persistent gradient; all or nothing. The caller checked
    /// the shape and the sequence and names the parameter.
    pub(crate) fn push_param_row(
        &mut self,
        op: &'static str,
        shape: Shape,
        init: Option<&[f32]>,
    ) -> Result<u32> {
        self.table
            .try_reserve(1)
            .map_err(|_| Error::AllocationFailed {
                op,
                bytes: size_of::<TensorEntry>(),
            })?;
        self.grad_ready.reserve(op, self.n_params + 1)?;
        let keep = self.store.persistent_blocks();
        let data = self.store.alloc_persistent(op, shape.numel())?;
        // The gradient goes at the end of the one gradient block (which may
        // move: every parameter's gradient is rebound below).
        if let Err(e) = self.store.grads_grow(op, shape.numel()) {
            self.store.truncate_persistent(keep);
            return Err(e);
        }
        if let Some(v) = init {
            self.store.access_one(data).copy_from_slice(v);
        }
        self.table.push(TensorEntry {
            shape,
            data,
            grad: None,
            requires_grad: true,
            retain: false,
            view_of: None,
            flow: false,
            unzeroed: false,
        });
        self.n_params += 1;
        self.bind_param_grads();
        Ok(self.n_params as u32 - 1)
    }

    pub(crate) fn registry(&self) -> &ParamRegistry {
        &self.registry
    }

    pub(crate) fn registry_mut(&mut self) -> &mut ParamRegistry {
        &mut self.registry
    }

    pub(crate) fn bind_param_grads(&mut self) {
        let Some(block) = self.store.grads() else {
            return;
        };
        let mut offset = 0;
        for e in &mut self.table[..self.n_params] {
            let n = e.shape.numel();
            e.grad = Some(Storage::sub(block, offset, n));
            offset += n;
        }
        debug_assert_eq!(offset, block.len());
        for i in self.n_params..self.table.len() {
            if let Some(root) = self.table[i].view_of
                && (root as usize) < self.n_params
            {
                self.table[i].grad = self.table[root as usize].grad;
            }
        }
    }

    /// A constant (non-trainable) activation holding a copy of `data`.
    pub fn tensor(&mut self, shape: &[usize], data: &[f32]) -> Result<Tensor> {
        const OP: &str = "tensor_new";
        let shape = Shape::new(OP, shape)?;
        if data.len() != shape.numel() {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!(
                    "data has {} values but shape {shape} needs {}",
                    data.len(),
                    shape.numel()
                ),
            });
        }
        self.reserve_input(OP)?;
        let id = self.push_output(OP, shape, false)?;
        let buf = self.table[id as usize].data;
        self.store.access_one(buf).copy_from_slice(data);
        self.note_input(id);
        Ok(self.handle(id))
    }

    // ---- reading ----------------------------------------------------------

    pub fn shape(&self, t: Tensor) -> Result<Shape> {
        self.shape_for("tensor_shape", t)
    }

    /// The element count of `t`.
    pub fn numel(&self, t: Tensor) -> Result<usize> {
        Ok(self.shape_for("tensor_numel", t)?.numel())
    }

    pub(crate) fn shape_for(&self, op: &'static str, t: Tensor) -> Result<Shape> {
        let id = self.resolve(op, t)?;
        Ok(self.table[id as usize].shape)
    }

    /// Copies the values of `t` into `out` (whose length must equal numel).
    pub fn read(&self, t: Tensor, out: &mut [f32]) -> Result<()> {
        self.read_buf("tensor_read", t, out, false)
    }

    /// Copies the gradient of `t` into `out`. Parameters always have one.
    /// An activation has one after backward only if [`retain_grad`]
    /// was called on it (or on a reshape of it) before backward: the memory
    /// of the other activation gradients is reused during the walk.
    ///
    /// [`retain_grad`]: Self::retain_grad
    pub fn read_grad(&self, t: Tensor, out: &mut [f32]) -> Result<()> {
        self.read_buf("tensor_read_grad", t, out, true)
    }

    fn read_buf(&self, op: &'static str, t: Tensor, out: &mut [f32], grad: bool) -> Result<()> {
        let id = self.resolve(op, t)?;
        let e = self.table[id as usize];
        if out.len() != e.shape.numel() {
            return Err(Error::InvalidArgument {
                op,
                what: format!(
                    "buffer holds {} values but tensor shape {} has {}",
                    out.len(),
                    e.shape,
                    e.shape.numel()
                ),
            });
        }
        let buf = if grad {
            match e.grad.filter(|_| e.requires_grad) {
                Some(g) => g,
                None => {
                    return Err(Error::Sequence {
                        op,
                        what: self.no_grad_reason(e),
                    });
                }
            }
        } else {
            e.data
        };
        out.copy_from_slice(self.store.read(buf));
        Ok(())
    }

    /// Why a tensor has no gradient to read, with advice that works for
    /// that case: a constant never has one, an activation has one only
    /// after backward, and only if it was retained before.
    fn no_grad_reason(&self, e: TensorEntry) -> String {
        let s = e.shape;
        if !e.requires_grad {
            format!(
                "tensor {s} has no gradient: it is a constant (made by ag_tensor_new, or with grad mode off), so no gradient is computed for it; read the gradient of a parameter, or of an activation computed from one"
            )
        } else if !self.backward_done {
            format!(
                "tensor {s} has no gradient yet: ag_backward has not run this iteration (for an activation, call ag_tensor_retain_grad on it, then ag_backward, then read it)"
            )
        } else {
            format!(
                "tensor {s} has no gradient: an activation keeps its gradient only if ag_tensor_retain_grad was called on it before ag_backward (next iteration, retain it before ag_backward)"
            )
        }
    }

    /// Keeps the gradient of activation `t` readable after backward (as
    /// PyTorch's `retain_grad`): without it an activation's gradient lives
    /// only during the walk, in memory shared with other gradients. Call it
    /// after `t` is made and before [`backward`](Self::backward). A reshape
    /// shares its base's gradient, so retaining either keeps both. A no-op
    /// for parameters, which always keep theirs.
    pub fn retain_grad(&mut self, t: Tensor) -> Result<()> {
        const OP: &str = "tensor_retain_grad";
        let id = self.resolve(OP, t)?;
        if (id as usize) < self.n_params {
            return Ok(());
        }
        let e = self.table[id as usize];
        if !e.requires_grad {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!(
                    "tensor {} does not require a gradient (a constant, or made with grad mode off)",
                    e.shape
                ),
            });
        }
        if self.backward_done {
            return Err(Error::Sequence {
                op: OP,
                what: "backward already ran this iteration; call ag_tensor_retain_grad before ag_backward".into(),
            });
        }
        let root = e.view_of.unwrap_or(id) as usize;
        self.table[id as usize].retain = true;
        self.table[root].retain = true;
        Ok(())
    }

    /// Reads a one-element tensor.
    pub fn item(&self, t: Tensor) -> Result<f32> {
        let mut v = [0.0f32];
        self.read_buf("tensor_item", t, &mut v, false)?;
        Ok(v[0])
    }

    /// Clears every parameter gradient.
    pub fn zero_grad(&mut self) {
        for i in 0..self.n_params {
            if let Some(g) = self.table[i].grad {
                self.store.access_one(g).fill(0.0);
            }
        }
        self.pending_grads = false;
        self.grads_checked_finite = false;
    }

    // ---- helpers for ops --------------------------------------------------

    /// Starts the worker if `work` (multiply-adds, or element operations
    /// weighted by their cost) is large enough to pay for a hand-off (a
    /// condvar wake-up, some microseconds); true if it can be used.
    pub(crate) fn want_pool(&mut self, work: usize) -> bool {
        if !Self::worth_two_threads(work) || self.pool_failed || cfg!(miri) {
            return false;
        }
        if self.pool.is_none() {
            self.pool = crate::pool::Pool::new();
            self.pool_failed = self.pool.is_none();
        }
        self.pool.is_some()
    }

    /// Whether `work` is enough to split across the pool (whether or not
    /// a pool runs): kernels whose bits depend on a split decide by this.
    pub(crate) fn worth_two_threads(work: usize) -> bool {
        work >= 1 << 21
    }

    #[inline(always)]
    pub(crate) fn handle(&self, id: u32) -> Tensor {
        let generation = if (id as usize) < self.n_params {
            0
        } else {
            self.store.epoch()
        };
        Tensor {
            index: id,
            context: self.id,
            generation,
        }
    }

    /// Checks a handle and returns its table index. Every op resolves
    /// each input: the common valid handle is a few compares inline, and
    /// anything else goes to [`resolve_checked`](Self::resolve_checked),
    /// which finds the exact error.
    #[inline(always)]
    pub(crate) fn resolve(&self, op: &'static str, t: Tensor) -> Result<u32> {
        let idx = t.index as usize;
        let valid = t.context == self.id
            && if t.generation == 0 {
                idx < self.n_params
            } else {
                t.generation == self.store.epoch()
                    && idx >= self.n_params
                    && idx < self.table.len()
                    && self.recompute.segments_len() == 0
            };
        // A context id is never 0, so a valid handle's is not either.
        if valid {
            return Ok(t.index);
        }
        self.resolve_checked(op, t)
    }

    #[cold]
    #[inline(never)]
    fn resolve_checked(&self, op: &'static str, t: Tensor) -> Result<u32> {
        if t.context == 0 {
            // No context has id 0: a zeroed or garbage handle.
            return Err(Error::InvalidHandle { op, index: t.index });
        }
        if t.context != self.id {
            return Err(Error::WrongContext {
                op,
                handle_context: t.context,
                context: self.id,
            });
        }
        let idx = t.index as usize;
        if t.generation == 0 {
            if idx < self.n_params {
                return Ok(t.index);
            }
            return Err(Error::InvalidHandle { op, index: t.index });
        }
        if idx < self.n_params {
            return Err(Error::InvalidHandle { op, index: t.index });
        }
        if t.generation != self.store.epoch() {
            // A generation from the future cannot come from this context.
            if t.generation > self.store.top_epoch() {
                return Err(Error::InvalidHandle { op, index: t.index });
            }
            return Err(Error::StaleHandle {
                op,
                generation: t.generation,
                current: self.store.epoch(),
            });
        }
        if idx >= self.table.len() {
            return Err(Error::InvalidHandle { op, index: t.index });
        }
        if let Some(segment) = self.recompute.sealed(t.index) {
            return Err(Error::SegmentInternal {
                op,
                index: t.index,
                segment,
            });
        }
        Ok(t.index)
    }

    pub(crate) fn entry(&self, id: u32) -> TensorEntry {
        self.table[id as usize]
    }

    /// Whether an op over `inputs` is recorded (and its output needs a grad).
    pub(crate) fn tracks(&self, inputs: &[u32]) -> bool {
        self.grad_enabled && inputs.iter().any(|&i| self.table[i as usize].requires_grad)
    }

    /// Appends a fresh output of `shape` to the table. Its contents are
    /// unspecified (NaN with `debug-arena`): the op writes every element.
    #[inline(always)]
    pub(crate) fn push_output(
        &mut self,
        op: &'static str,
        shape: Shape,
        requires_grad: bool,
    ) -> Result<u32> {
        self.reserve_slot(op)?;
        // An output that needs no gradient is not recorded, so it could not
        // be replayed: it never goes to a recomputed segment's scratch,
        // unless grad mode is off (then nothing is replayed at all, and a
        // segment's internal tensors die with it).
        let data = if requires_grad || !self.grad_enabled {
            self.store.alloc_scratchable::<f32>(op, shape.numel())?
        } else {
            self.store.alloc_main::<f32>(op, shape.numel())?
        };
        self.table.push(TensorEntry {
            shape,
            data,
            grad: None,
            requires_grad,
            retain: false,
            view_of: None,
            flow: false,
            unzeroed: false,
        });
        Ok(self.table.len() as u32 - 1)
    }

    /// Appends a view sharing `base`'s memory with a new shape.
    pub(crate) fn push_view(&mut self, op: &'static str, base: u32, shape: Shape) -> Result<u32> {
        self.reserve_slot(op)?;
        let b = self.table[base as usize];
        let requires_grad = self.grad_enabled && b.requires_grad;
        let root = b.view_of.unwrap_or(base);
        let grad = if (root as usize) < self.n_params {
            b.grad
        } else {
            None
        };
        self.table.push(TensorEntry {
            shape,
            data: b.data,
            grad,
            requires_grad,
            retain: false,
            view_of: Some(root),
            flow: false,
            unzeroed: false,
        });
        Ok(self.table.len() as u32 - 1)
    }

    /// SEQUENCE while a captured step is the current iteration: its graph
    /// cannot grow.
    #[inline(always)]
    pub(crate) fn check_not_resident(&self, op: &'static str) -> Result<()> {
        match self.capture.resident() {
            Some(k) => Err(Error::Sequence {
                op,
                what: format!(
                    "the current iteration is captured step {k} (replayed or just captured); its graph cannot grow: call ag_reset first"
                ),
            }),
            None => Ok(()),
        }
    }

    #[inline(always)]
    fn reserve_slot(&mut self, op: &'static str) -> Result<()> {
        self.check_not_resident(op)?;
        if self.table.len() >= (u32::MAX - 1) as usize {
            return Err(Error::TooLarge {
                op,
                what: "too many tensors in one iteration".into(),
            });
        }
        // Past warm-up both have room: two compares, no call.
        if self.table.len() == self.table.capacity() {
            self.table
                .try_reserve(1)
                .map_err(|_| Error::AllocationFailed {
                    op,
                    bytes: size_of::<TensorEntry>(),
                })?;
        }
        if self.tape.len() == self.tape.capacity() {
            self.tape
                .try_reserve(1)
                .map_err(|_| Error::AllocationFailed {
                    op,
                    bytes: size_of::<Node>(),
                })?;
        }
        Ok(())
    }

    /// Records `op` as the producer of `out` when `out` needs a gradient
    /// (capacity was reserved by push_output, so this never allocates).
    #[inline(always)]
    pub(crate) fn record(&mut self, op: Op, out: u32) {
        self.capture.log(op, out);
        if !self.table[out as usize].requires_grad {
            return;
        }
        self.tape.push(Node { op, out });
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
        self.pool_failed = single;
        if single {
            self.pool = None;
        }
    }
}
