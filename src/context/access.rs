//! The narrow interface the rest of the crate uses on a [`Context`]: one
//! table row at a time, checked access to buffers (the arena and persistent
//! blocks), gradient slots, the worker thread paired with a kernel's
//! slices, and the iteration flags. Nothing here hands out the storage or
//! the pool, nor the table or tape for writing (only whole-row reads), so
//! every module outside this file and `mod.rs` reaches memory through the
//! checks of [`Storage`](crate::arena::Storage).

use super::capture::state::Captures;
use super::{Context, TensorEntry};
use crate::arena::{Activations, ArenaStats, Buf, Plain, Slices, Storage};
use crate::buffers::{BufferRegistry, StatsSet};
use crate::error::{Error, Result};
use crate::grad_ready::GradReady;
use crate::optim::Optimizer;
use crate::plan::{self, GradPlan};
use crate::pool::Pool;
use crate::recompute::Recompute;
use crate::tape::Node;

impl Context {
    /// One table row, borrowed (for values that borrow from it).
    #[inline]
    pub(crate) fn entry_ref(&self, id: u32) -> &TensorEntry {
        &self.table[id as usize]
    }

    /// One table row, to update its gradient slot, flags or buffer.
    #[inline]
    pub(crate) fn entry_mut(&mut self, id: u32) -> &mut TensorEntry {
        &mut self.table[id as usize]
    }

    /// Rows of the tensor table (parameters first).
    #[inline]
    pub(crate) fn live_tensors(&self) -> usize {
        self.table.len()
    }

    /// Ops recorded this iteration.
    #[inline]
    pub(crate) fn tape_len(&self) -> usize {
        self.tape.len()
    }

    /// The output of the op recorded at tape position `i`.
    pub(crate) fn node_out(&self, i: u32) -> u32 {
        self.tape[i as usize].out
    }

    /// The op recorded at tape position `i`.
    pub(crate) fn node(&self, i: u32) -> Node {
        self.tape[i as usize]
    }

    /// Computes `plan` for a backward from `loss` over this tape and table
    /// (see [`GradPlan::prepare`]).
    pub(crate) fn plan_backward(&self, plan: &mut GradPlan, loss: u32) {
        let row = |id: u32| {
            let e = &self.table[id as usize];
            plan::Row {
                view_of: e.view_of,
                requires_grad: e.requires_grad,
                retain: e.retain,
                len: e.shape.numel(),
            }
        };
        plan.prepare(
            &self.tape,
            self.live_tensors(),
            self.param_count(),
            loss,
            &row,
        );
    }

    /// Every row of the table, read-only (a captured step copies them and
    /// its program reads them whole).
    #[inline]
    pub(crate) fn table_rows(&self) -> &[TensorEntry] {
        &self.table
    }

    /// The ops recorded this iteration, read-only.
    pub(crate) fn tape_nodes(&self) -> &[Node] {
        &self.tape
    }

    /// The gradient plan of the last backward, read-only.
    pub(crate) fn current_plan(&self) -> &GradPlan {
        &self.plan
    }

    /// Room for one more row and one more tape record: TOO_LARGE past the
    /// last index a handle can name, ALLOCATION_FAILED if either cannot
    /// grow. Past warm-up both have room: two compares, no call.
    #[inline(always)]
    pub(crate) fn reserve_row(&mut self, op: &'static str) -> Result<()> {
        if self.table.len() >= (u32::MAX - 1) as usize {
            return Err(Error::TooLarge {
                op,
                what: "too many tensors in one iteration".into(),
            });
        }
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

    /// Room for one more parameter: its table row and its place in the
    /// gradient-ready bookkeeping.
    pub(crate) fn reserve_param_row(&mut self, op: &'static str) -> Result<()> {
        self.table
            .try_reserve(1)
            .map_err(|_| Error::AllocationFailed {
                op,
                bytes: size_of::<TensorEntry>(),
            })?;
        self.grad_ready.reserve(op, self.n_params + 1)
    }

    /// Appends `entry` to the table (room was reserved); its row index.
    #[inline(always)]
    pub(crate) fn push_row(&mut self, entry: TensorEntry) -> u32 {
        self.table.push(entry);
        self.table.len() as u32 - 1
    }

    /// Appends a parameter's row (room was reserved; the caller checked
    /// the sequence, so the parameters stay rows 0..param_count) and
    /// rebinds the parameters' gradients.
    pub(crate) fn push_param_entry(&mut self, entry: TensorEntry) -> u32 {
        self.table.push(entry);
        self.n_params += 1;
        self.bind_param_grads();
        self.n_params as u32 - 1
    }

    /// Records `node` on the tape (room was reserved).
    #[inline(always)]
    pub(crate) fn push_node(&mut self, node: Node) {
        self.tape.push(node);
    }

    /// Logs `op` (output `out`) to an open capture; nothing otherwise.
    #[inline(always)]
    pub(crate) fn log_capture(&mut self, op: crate::ops::Op, out: u32) {
        self.capture.log(op, out);
    }

    /// Points every parameter's gradient (and every view of a parameter's)
    /// at its place in the gradient block.
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

    /// Makes `rows` and `tape` this iteration's activation rows and tape
    /// (a captured step becoming the current iteration); capacity grows
    /// the first time only.
    pub(crate) fn load_activation_rows(&mut self, rows: &[TensorEntry], tape: &[Node]) {
        self.table.truncate(self.n_params);
        self.table.extend_from_slice(rows);
        self.tape.clear();
        self.tape.extend_from_slice(tape);
    }

    /// Forgets this iteration's activation rows and tape.
    pub(crate) fn clear_activation_rows(&mut self) {
        self.tape.clear();
        self.table.truncate(self.n_params);
    }

    // ---- checked access to buffers (see arena::Storage) --------------------

    /// `W` writable and `R` read-only slices of one kernel call.
    #[inline(always)]
    pub(crate) fn access<const W: usize, const R: usize>(
        &mut self,
        w: [Buf; W],
        r: [Buf; R],
    ) -> ([&mut [f32]; W], [&[f32]; R]) {
        self.store.access(w, r)
    }

    /// Like [`access`](Self::access), with `I` read-only id buffers.
    #[inline(always)]
    pub(crate) fn access_ids<const W: usize, const R: usize, const I: usize>(
        &mut self,
        w: [Buf; W],
        r: [Buf; R],
        ids: [Buf<u32>; I],
    ) -> Slices<'_, W, R, I> {
        self.store.access_ids(w, r, ids)
    }

    /// Like [`access`](Self::access), with the worker thread when `par`
    /// (the caller asked [`want_pool`](Self::want_pool) first).
    #[inline(always)]
    pub(crate) fn access_on<const W: usize, const R: usize>(
        &mut self,
        par: bool,
        w: [Buf; W],
        r: [Buf; R],
    ) -> (Option<&Pool>, [&mut [f32]; W], [&[f32]; R]) {
        let (wm, rm) = self.store.access(w, r);
        (self.pool.as_ref().filter(|_| par), wm, rm)
    }

    pub(crate) fn access_one<T: Plain>(&mut self, b: Buf<T>) -> &mut [T] {
        self.store.access_one(b)
    }

    pub(crate) fn read_only<T: Plain>(&self, b: Buf<T>) -> &[T] {
        self.store.read(b)
    }

    /// An arena buffer for this iteration, never routed to a recomputed
    /// segment's scratch region (values a replay cannot recompute).
    pub(crate) fn alloc_main<T: Plain>(&mut self, op: &'static str, len: usize) -> Result<Buf<T>> {
        self.store.alloc_main(op, len)
    }

    /// An arena buffer the caller overwrites whole; inside a recomputed
    /// segment it comes from the scratch region.
    pub(crate) fn alloc_scratchable<T: Plain>(
        &mut self,
        op: &'static str,
        len: usize,
    ) -> Result<Buf<T>> {
        self.store.alloc_scratchable(op, len)
    }

    /// A persistent allocation point that fault injection may fail.
    pub(crate) fn fault_point(&mut self, op: &'static str, bytes: usize) -> Result<()> {
        self.store.fault_point(op, bytes)
    }

    /// The newest generation ever issued (a handle's from past it cannot
    /// come from this context).
    #[inline]
    pub(crate) fn top_generation(&self) -> u64 {
        self.store.top_epoch()
    }

    /// Moves this iteration to a generation never issued before.
    pub(crate) fn fresh_generation(&mut self) {
        self.store.fresh_epoch()
    }

    /// Swaps the iteration's activation memory and gradient plan with
    /// `act` and `plan` (parking one, making the other current) under
    /// `epoch`.
    pub(crate) fn swap_iteration_memory(
        &mut self,
        act: &mut Activations,
        plan: &mut GradPlan,
        epoch: u64,
    ) {
        self.store.swap_activations(act, epoch);
        std::mem::swap(&mut self.plan, plan);
    }

    // ---- persistent memory (optimizer state, gradient block) ---------------

    pub(crate) fn alloc_persistent(&mut self, op: &'static str, len: usize) -> Result<Buf> {
        self.store.alloc_persistent(op, len)
    }

    /// Appends `len` floats to the gradient block (which may move: rebind
    /// the parameters' gradients after).
    pub(crate) fn grow_grads(&mut self, op: &'static str, len: usize) -> Result<()> {
        self.store.grads_grow(op, len)
    }

    /// Bytes of every persistent block (parameters, gradients, optimizer
    /// state).
    pub(crate) fn persistent_bytes(&self) -> usize {
        self.store.persistent_bytes()
    }

    /// The gradient block's address and length for the C boundary
    /// (zero-copy).
    pub(crate) fn grads_ptr(&mut self) -> Option<(*mut f32, usize)> {
        self.store.grads_ptr()
    }

    pub(crate) fn persistent_blocks(&self) -> usize {
        self.store.persistent_blocks()
    }

    pub(crate) fn truncate_persistent(&mut self, keep: usize) {
        self.store.truncate_persistent(keep)
    }

    /// Trims the gradient block to its parameters and rebinds their
    /// gradients if it moved; true if it moved.
    pub(crate) fn trim_grads(&mut self) -> bool {
        let moved = self.store.grads_trim();
        if moved {
            self.bind_param_grads();
        }
        moved
    }

    /// The one block holding every parameter gradient, packed in creation
    /// order (None before the first parameter).
    pub(crate) fn grads_block(&self) -> Option<Buf> {
        self.store.grads()
    }

    // ---- the recompute scratch region --------------------------------------

    pub(crate) fn scratch_begin(&mut self) {
        self.store.scratch_begin()
    }

    pub(crate) fn scratch_end(&mut self) {
        self.store.scratch_end()
    }

    pub(crate) fn in_scratch<T>(&self, b: Buf<T>) -> bool {
        self.store.in_scratch(b)
    }

    pub(crate) fn routable_bytes(&self) -> usize {
        self.store.routable_bytes()
    }

    pub(crate) fn scratch_bytes(&self) -> usize {
        self.store.scratch_bytes()
    }

    pub(crate) fn arena_stats(&self) -> ArenaStats {
        self.store.stats()
    }

    // ---- iteration state ---------------------------------------------------

    #[inline]
    pub(crate) fn backward_done(&self) -> bool {
        self.backward_done
    }

    pub(crate) fn set_backward_done(&mut self) {
        self.backward_done = true;
    }

    /// This iteration's backward has not run (or its result was dropped).
    pub(crate) fn clear_backward_done(&mut self) {
        self.backward_done = false;
    }

    /// Whether a recomputed segment is replaying its forward now.
    pub(crate) fn recomputing(&self) -> bool {
        self.recomputing
    }

    /// Marks the start and end of a recomputed segment's forward replay.
    pub(crate) fn set_recomputing(&mut self, on: bool) {
        self.recomputing = on;
    }

    /// The captured steps and the capture state, read-only.
    #[inline(always)]
    pub(crate) fn captures(&self) -> &Captures {
        &self.capture
    }

    /// The captured steps and capture state, driven through their methods.
    #[inline(always)]
    pub(crate) fn captures_mut(&mut self) -> &mut Captures {
        &mut self.capture
    }

    // ---- batch norm running statistics -------------------------------------

    /// The registry, for checkpoints and safetensors files.
    pub(crate) fn buffers(&self) -> &BufferRegistry {
        &self.buffers
    }

    /// Checks `prefix` can name a new set of statistics.
    pub(crate) fn check_new_stats(&mut self, op: &'static str, prefix: &str) -> Result<()> {
        self.buffers.check_new(op, prefix)
    }

    /// Adds a set of statistics; its index.
    pub(crate) fn push_stats(&mut self, set: StatsSet) -> u32 {
        self.buffers.push(set)
    }

    /// Sets the count of training batches of set `i` (loading).
    pub(crate) fn set_batches_tracked(&mut self, i: usize, n: u64) {
        self.buffers.get_mut(i).num_batches = n;
    }

    /// Counts one more training batch in set `i`.
    pub(crate) fn count_batch(&mut self, i: usize) {
        let set = self.buffers.get_mut(i);
        set.num_batches = set.num_batches.saturating_add(1);
    }

    /// Whether parameter gradients hold values no optimizer step consumed.
    pub(crate) fn grads_pending(&self) -> bool {
        self.pending_grads
    }

    /// Marks the gradients as new (or consumed); either way they are no
    /// longer known to be finite.
    pub(crate) fn set_grads_pending(&mut self, pending: bool) {
        self.pending_grads = pending;
        self.grads_checked_finite = false;
    }

    /// Whether clip_grad_norm proved the current gradients finite.
    pub(crate) fn grads_checked_finite(&self) -> bool {
        self.grads_checked_finite
    }

    pub(crate) fn set_grads_checked_finite(&mut self) {
        self.grads_checked_finite = true;
    }

    pub(crate) fn has_optimizer(&self) -> bool {
        self.optimizer.is_some()
    }

    pub(crate) fn optimizer_state(&self) -> Option<&Optimizer> {
        self.optimizer.as_ref()
    }

    pub(crate) fn optimizer_state_mut(&mut self) -> Option<&mut Optimizer> {
        self.optimizer.as_mut()
    }

    pub(crate) fn set_optimizer_state(&mut self, opt: Option<Optimizer>) {
        self.optimizer = opt;
    }

    /// The recomputation segments and their measurements.
    #[inline]
    pub(crate) fn rc(&self) -> &Recompute {
        &self.recompute
    }

    pub(crate) fn rc_mut(&mut self) -> &mut Recompute {
        &mut self.recompute
    }

    /// The range set by optimizer_shard, as (first, end).
    pub(crate) fn pending_shard(&self) -> Option<(usize, usize)> {
        self.pending_shard
    }

    pub(crate) fn set_pending_shard(&mut self, first: usize, len: usize) {
        self.pending_shard = Some((first, first + len));
    }

    /// Takes the gradient-ready bookkeeping for a walk (put it back after).
    pub(crate) fn take_grad_ready(&mut self) -> GradReady {
        std::mem::take(&mut self.grad_ready)
    }

    pub(crate) fn put_grad_ready(&mut self, ready: GradReady) {
        self.grad_ready = ready;
    }

    pub(crate) fn grad_ready(&self) -> &GradReady {
        &self.grad_ready
    }

    /// Takes the gradient plan for a backward (put it back after).
    pub(crate) fn take_plan(&mut self) -> GradPlan {
        std::mem::take(&mut self.plan)
    }

    pub(crate) fn put_plan(&mut self, plan: GradPlan) {
        self.plan = plan;
    }

    /// How many times the gradient plan was solved (tests of its cache).
    #[cfg(test)]
    pub(crate) fn plan_solves(&self) -> u64 {
        self.plan.solves
    }

    /// Threads this context computes on: the process's thread count
    /// (`AG_NUM_THREADS`, `ag_set_num_threads` or the cores), or 1 when a
    /// test keeps it on the calling thread.
    pub(crate) fn threads(&self) -> u32 {
        if self.single_thread {
            1
        } else {
            crate::pool::thread_info().threads as u32
        }
    }

    /// Whether the worker thread is running (tests of the size threshold).
    #[cfg(test)]
    pub(crate) fn pool_started(&self) -> bool {
        self.pool.is_some()
    }

    // ---- gradient slots during backward ------------------------------------

    /// Whether `id`'s gradient slot (its root's, for a view) is born but not
    /// yet written; clears the mark, as the caller now writes or zeroes it.
    #[inline(always)]
    pub(crate) fn take_unzeroed(&mut self, id: u32) -> bool {
        let root = self.table[id as usize].view_of.unwrap_or(id) as usize;
        std::mem::take(&mut self.table[root].unzeroed)
    }

    /// Zeroes `id`'s gradient slot if it is born but not yet written.
    #[inline(always)]
    pub(crate) fn settle_grad(&mut self, id: u32) {
        if self.take_unzeroed(id)
            && let Some(g) = self.table[id as usize].grad
        {
            self.zero_fill(g);
        }
    }

    /// The gradient buffer of an op's output during backward.
    #[inline(always)]
    pub(crate) fn grad_out(&mut self, out: u32) -> Option<Buf> {
        self.settle_grad(out);
        self.table[out as usize].grad
    }

    /// The gradient buffer of an input during backward, if it needs one;
    /// the kernel adds into it.
    #[inline(always)]
    pub(crate) fn grad_of(&mut self, id: u32) -> Option<Buf> {
        if !self.table[id as usize].requires_grad {
            return None;
        }
        self.settle_grad(id);
        self.table[id as usize].grad
    }

    /// Like [`grad_of`](Self::grad_of), for a kernel that can also write
    /// every element with `=`: with `true`, the slot is born here and holds
    /// stale values, and the kernel must overwrite all of it (no zero fill
    /// first); with `false`, it adds as usual.
    #[inline(always)]
    pub(crate) fn grad_to_overwrite(&mut self, id: u32) -> Option<(Buf, bool)> {
        if !self.table[id as usize].requires_grad {
            return None;
        }
        let fresh = self.take_unzeroed(id);
        self.table[id as usize].grad.map(|g| (g, fresh))
    }
}
