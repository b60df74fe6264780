//! The program of a step whose every op is a one-element op or a
//! one-element slice (a scalar model), in a compact form: each op an
//! instruction over one dense value array and one dense gradient array,
//! the walk's "born, not written yet" marks resolved at capture.
//!
//! The general program reads and writes each scalar through its arena
//! buffer (a live-epoch check per access) and keeps the marks in its rows,
//! testing them at each gradient access; on a scalar recursion that
//! bookkeeping, not the arithmetic, was the cost of an op. Here capture
//! walks the backward once without values, doing what `run` does to the
//! marks, and writes down what each access did: a slot's first write
//! starts from 0.0 (the walk's zero fill, then `+=`) or overwrites it
//! whole, exactly where the walk would. The kernels are the same
//! (`OneKernels`), called on the same values in the same order, so the
//! bits are the general program's.
//!
//! Values from outside the ops (parameters, inputs, constants) are read
//! into the value array before the forward, every op's output is written
//! back to its buffer after it (a caller may read any activation);
//! parameters' gradients are read in before the walk and written back
//! after it. Activations' gradients never leave the array: they are not
//! kept past the walk (a retained one takes the ordinary path).
//!
//! The marks are known at capture for activations only: a parameter's
//! is the table's at replay time, clear after a finished walk or
//! `zero_grad`. The walk assumes it clear and each parameter's gradient
//! state as at capture; a replay that finds otherwise runs the general
//! program.

use super::{Kind, OneKernels, Row, Step1};
use crate::arena::Buf;
use crate::context::Context;
use crate::ops::{BinaryFn, OneOp, UnaryFn};

/// No slot.
const NONE: u32 = u32::MAX;

/// The most gradient elements the arrays hold (parameters' included).
const MAX_SLOTS: usize = 1 << 20;

/// A forward instruction's op: the common binary ops as their own codes
/// (one dispatch, not two), any other through `OneOp`, or a copy (a
/// one-element slice).
#[derive(Clone, Copy)]
enum Code {
    Add,
    Sub,
    Mul,
    Div,
    Op(OneOp),
    Copy,
}

impl Code {
    fn of(op: OneOp) -> Code {
        match op {
            OneOp::Binary(BinaryFn::Add) => Code::Add,
            OneOp::Binary(BinaryFn::Sub) => Code::Sub,
            OneOp::Binary(BinaryFn::Mul) => Code::Mul,
            OneOp::Binary(BinaryFn::Div) => Code::Div,
            op => Code::Op(op),
        }
    }
}

/// `vals[out] = code(vals[a], vals[b])` (`b` read by binary ops only);
/// its output is written back to `Dense::stores` at the same index.
#[derive(Clone, Copy)]
struct Fwd {
    code: Code,
    out: u32,
    a: u32,
    b: u32,
}

/// What a backward instruction does to `grads[d]` (`g` the output's
/// gradient slot, `a` and `b` value slots). `zero`: the slot was born and
/// this is its first write, which starts from 0.0 as the walk's zero
/// fill then `+=` does.
#[derive(Clone, Copy)]
enum Grad {
    /// `grads[d..d + len] = 0` (a zero fill not folded into a write).
    Fill(u32),
    /// The loss's seed: `grads[d] += 1`.
    Seed,
    /// `add_scaled` (the equal-shape add and sub): `assign` overwrites.
    AddScaled {
        k: f32,
        assign: bool,
    },
    /// `grads[d] += grad_a(f, grads[g], vals[a], vals[b])`.
    GradA {
        f: BinaryFn,
        zero: bool,
    },
    /// `grads[d] += grad_b(f, grads[g], vals[a], vals[b])`.
    GradB {
        f: BinaryFn,
        zero: bool,
    },
    /// `GradA` and `GradB` of a multiply (their own codes: one dispatch).
    MulA {
        zero: bool,
    },
    MulB {
        zero: bool,
    },
    /// A unary op's backward: input `vals[a]`, output `vals[b]`.
    Unary {
        f: UnaryFn,
        assign: bool,
        zero: bool,
    },
    /// A scale, pow or clamp op's backward: input `vals[a]`.
    Map {
        op: OneOp,
        zero: bool,
    },
    /// A one-element slice's backward: `grads[d] += grads[g]`.
    Pick {
        zero: bool,
    },
}

#[derive(Clone, Copy)]
struct Bwd {
    op: Grad,
    d: u32,
    g: u32,
    a: u32,
    b: u32,
}

/// An empty vector with room for `n`, or None if it cannot be allocated
/// (the step then runs the general program).
fn empty<T>(n: usize) -> Option<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n).ok()?;
    Some(v)
}

/// A vector of `n` copies of `v`, or None if it cannot be allocated.
fn filled<T: Clone>(n: usize, v: T) -> Option<Vec<T>> {
    let mut out = empty(n)?;
    out.resize(n, v);
    Some(out)
}

/// A scalar step's compact program (see the module docs).
pub(super) struct Dense {
    fwd: Vec<Fwd>,
    bwd: Vec<Bwd>,
    /// Values from outside the ops, read before the forward: (row,
    /// element, value slot).
    loads: Vec<(u32, u32, u32)>,
    /// Each forward instruction's output buffer, written as it is
    /// computed (the stores overlap the op chain's latency).
    stores: Vec<Buf>,
    /// The parameters' gradients the walk reads or writes: (row, first
    /// gradient slot, elements).
    param_grads: Vec<(u32, u32, u32)>,
    /// Per parameter, the state the walk was resolved for: whether it
    /// needs a gradient and its gradient buffer's length, if any.
    param_state: Vec<(bool, Option<usize>)>,
    vals: Vec<f32>,
    grads: Vec<f32>,
}

/// The walk's marks as `run` keeps them, replayed without values at
/// capture, emitting what each gradient access does.
struct Walk {
    n_params: usize,
    /// Per row: its first gradient slot, or NONE (no gradient buffer).
    gslot: Vec<u32>,
    glen: Vec<u32>,
    /// Per row: its value slot, or NONE.
    vslot: Vec<u32>,
    needs: Vec<bool>,
    mark: Vec<bool>,
    /// The slot holds a value the walk wrote (or, for a parameter, the
    /// table's): reading it before that would read a stale slot.
    defined: Vec<bool>,
    touched: Vec<bool>,
    out: Vec<Bwd>,
}

/// A capture-time refusal: the step runs the general program.
struct Refused;

impl Walk {
    fn emit(&mut self, op: Grad, d: u32, g: u32, a: u32, b: u32) {
        self.out.push(Bwd { op, d, g, a, b });
    }

    fn value(&self, id: u32) -> Result<u32, Refused> {
        match self.vslot[id as usize] {
            NONE => Err(Refused),
            v => Ok(v),
        }
    }

    fn touch(&mut self, id: u32) {
        if (id as usize) < self.n_params {
            self.touched[id as usize] = true;
        }
    }

    /// As `Program::mark_births`.
    fn mark_births(&mut self, births: &[(u32, u32)], next: &mut usize, at: u32) {
        while let Some(&(pos, t)) = births.get(*next) {
            if pos < at {
                break;
            }
            if self.gslot[t as usize] != NONE {
                self.mark[t as usize] = true;
            }
            *next += 1;
        }
    }

    /// A zero fill of `id`'s whole slot, as `settle` does.
    fn fill(&mut self, id: u32) {
        let i = id as usize;
        self.emit(Grad::Fill(self.glen[i]), self.gslot[i], 0, 0, 0);
        self.defined[i] = true;
        self.touch(id);
    }

    /// As `grad_out`: the slot read, settled first.
    fn grad_out(&mut self, id: u32) -> Result<Option<u32>, Refused> {
        let i = id as usize;
        if std::mem::take(&mut self.mark[i]) && self.gslot[i] != NONE {
            self.fill(id);
        }
        if self.gslot[i] == NONE {
            return Ok(None);
        }
        if !self.defined[i] {
            return Err(Refused);
        }
        self.touch(id);
        Ok(Some(self.gslot[i]))
    }

    /// As `grad_of` for a slot written next: its settle's zero fill is
    /// folded into that write (`zero`) on a one-element slot, emitted
    /// on a larger one.
    fn grad_of(&mut self, id: u32) -> Result<Option<(u32, bool)>, Refused> {
        let i = id as usize;
        if !self.needs[i] {
            return Ok(None);
        }
        let mut zero = std::mem::take(&mut self.mark[i]);
        if self.gslot[i] == NONE {
            return Ok(None);
        }
        if zero && self.glen[i] != 1 {
            self.fill(id);
            zero = false;
        }
        if !zero && !self.defined[i] {
            return Err(Refused);
        }
        self.touch(id);
        Ok(Some((self.gslot[i], zero)))
    }

    /// A write of `grad_of`'s slot that did not happen: its fill did.
    fn unwritten(&mut self, id: u32, g: Option<(u32, bool)>) {
        if let Some((_, true)) = g {
            self.fill(id);
        }
    }

    /// The slot a write of `grad_of`'s will define.
    fn written(&mut self, id: u32) {
        self.defined[id as usize] = true;
    }

    /// As `grad_to_overwrite`: (slot, fresh).
    fn grad_to_overwrite(&mut self, id: u32) -> Option<(u32, bool)> {
        let i = id as usize;
        if !self.needs[i] {
            return None;
        }
        let fresh = std::mem::take(&mut self.mark[i]);
        (self.gslot[i] != NONE).then_some((self.gslot[i], fresh))
    }

    /// A write into `grad_to_overwrite`'s slot: overwriting (fresh) or
    /// adding to a defined value.
    fn overwrite(&mut self, id: u32, fresh: bool) -> Result<(), Refused> {
        let i = id as usize;
        if !fresh && !self.defined[i] {
            return Err(Refused);
        }
        if self.glen[i] != 1 {
            return Err(Refused);
        }
        self.defined[i] = true;
        self.touch(id);
        Ok(())
    }

    /// One op's backward, as `Program::backward` does it for the kinds
    /// a dense step has.
    fn backward(&mut self, s: Step1) -> Result<(), Refused> {
        match s.op {
            Kind::One(OneOp::Binary(f)) => {
                let Some(dout) = self.grad_out(s.out)? else {
                    return Ok(());
                };
                if let Some(sign) = f.sum_sign()
                    && s.same
                {
                    let (ga, gb) = (self.grad_to_overwrite(s.a), self.grad_to_overwrite(s.b));
                    for (x, grad, k) in [(s.a, ga, 1.0), (s.b, gb, sign)] {
                        if let Some((d, fresh)) = grad {
                            self.overwrite(x, fresh)?;
                            let op = Grad::AddScaled { k, assign: fresh };
                            self.emit(op, d, dout, 0, 0);
                        }
                    }
                    return Ok(());
                }
                let (va, vb) = (self.value(s.a)?, self.value(s.b)?);
                if let Some((d, zero)) = self.grad_of(s.a)? {
                    self.written(s.a);
                    let op = match f {
                        BinaryFn::Mul => Grad::MulA { zero },
                        f => Grad::GradA { f, zero },
                    };
                    self.emit(op, d, dout, va, vb);
                }
                if let Some((d, zero)) = self.grad_of(s.b)? {
                    self.written(s.b);
                    let op = match f {
                        BinaryFn::Mul => Grad::MulB { zero },
                        f => Grad::GradB { f, zero },
                    };
                    self.emit(op, d, dout, va, vb);
                }
            }
            Kind::One(OneOp::Unary(f)) => {
                let Some(dout) = self.grad_out(s.out)? else {
                    return Ok(());
                };
                let Some((d, fresh)) = self.grad_to_overwrite(s.a) else {
                    return Ok(());
                };
                self.overwrite(s.a, fresh)?;
                let assign = fresh && f.assigns_fresh_grad();
                let op = Grad::Unary {
                    f,
                    assign,
                    zero: fresh && !assign,
                };
                let (x, y) = (self.value(s.a)?, self.value(s.out)?);
                self.emit(op, d, dout, x, y);
            }
            Kind::One(op) => {
                // Both looked up, in this order, as `Program::backward`.
                let (dx, dout) = (self.grad_of(s.a)?, self.grad_out(s.out)?);
                let (Some((d, zero)), Some(dout)) = (dx, dout) else {
                    self.unwritten(s.a, dx);
                    return Ok(());
                };
                self.written(s.a);
                let x = self.value(s.a)?;
                self.emit(Grad::Map { op, zero }, d, dout, x, x);
            }
            Kind::Pick(at) => {
                let (dx, dout) = (self.grad_of(s.a)?, self.grad_out(s.out)?);
                let (Some((d, zero)), Some(dout)) = (dx, dout) else {
                    self.unwritten(s.a, dx);
                    return Ok(());
                };
                if at >= self.glen[s.a as usize] {
                    return Err(Refused);
                }
                self.written(s.a);
                self.emit(Grad::Pick { zero }, d + at, dout, 0, 0);
            }
            _ => return Err(Refused),
        }
        Ok(())
    }
}

impl Dense {
    /// The compact program of a step of one-element ops and slices, or
    /// None for any other step (or one whose walk reads a gradient slot
    /// before writing it, which the plan never makes).
    pub(super) fn build(
        ctx: &Context,
        fwd: &[Step1],
        bwd: &[Step1],
        births: &[(u32, u32)],
        rows: &[Row],
        loss: u32,
    ) -> Option<Dense> {
        let scalar = |s: &Step1| matches!(s.op, Kind::One(_) | Kind::Pick(_));
        if !fwd.iter().all(scalar) || !bwd.iter().all(scalar) {
            return None;
        }
        let n_params = ctx.param_count();
        let table = ctx.table_rows();
        let n = rows.len();
        let mut vslot = filled(n, NONE)?;
        // At most two loads, one store and one instruction per op.
        let (mut loads, mut stores, mut fwd_out) =
            (empty(2 * fwd.len())?, empty(fwd.len())?, empty(fwd.len())?);
        let mut n_vals = 0u32;
        let new_slot = |n_vals: &mut u32| {
            *n_vals += 1;
            *n_vals - 1
        };
        for s in fwd {
            let out = s.out as usize;
            if vslot[out] != NONE || out < n_params || rows[out].data.len() != 1 {
                return None;
            }
            let code = match s.op {
                Kind::One(op) => Code::of(op),
                _ => Code::Copy,
            };
            // Operands from outside the ops are read in once (a slice's
            // element of a larger tensor into a slot of its own).
            let at = match s.op {
                Kind::Pick(at) => at,
                _ => 0,
            };
            let mut operand = |x: u32| {
                let x = x as usize;
                if vslot[x] != NONE {
                    return vslot[x];
                }
                let slot = new_slot(&mut n_vals);
                loads.push((x as u32, at, slot));
                if rows[x].data.len() == 1 {
                    vslot[x] = slot;
                }
                slot
            };
            let a = operand(s.a);
            let b = if s.b == s.a { a } else { operand(s.b) };
            vslot[out] = new_slot(&mut n_vals);
            stores.push(rows[out].data);
            fwd_out.push(Fwd {
                code,
                out: vslot[out],
                a,
                b,
            });
        }
        // Gradient slots: a row's whole buffer.
        let (mut gslot, mut glen) = (filled(n, NONE)?, filled(n, 0u32)?);
        let mut needs = filled(n, false)?;
        let mut n_grads = 0usize;
        let mut param_state = empty(n_params)?;
        for (i, row) in rows.iter().enumerate() {
            let (grad, need) = if i < n_params {
                let e = &table[i];
                param_state.push((e.requires_grad, e.grad.map(|g| g.len())));
                (e.grad, e.requires_grad)
            } else {
                (row.grad, row.needs)
            };
            needs[i] = need;
            if let Some(g) = grad {
                if n_grads + g.len() > MAX_SLOTS {
                    return None;
                }
                gslot[i] = n_grads as u32;
                glen[i] = g.len() as u32;
                n_grads += g.len();
            }
        }
        let mut defined = filled(n, false)?;
        defined[..n_params].fill(true);
        let mut walk = Walk {
            n_params,
            gslot,
            glen,
            vslot,
            needs,
            mark: filled(n, false)?,
            defined,
            touched: filled(n_params, false)?,
            // At most five per op (three fills, two writes), the seed and
            // the parameters' last fills.
            out: empty(5 * bwd.len() + n_params + 2)?,
        };
        // As `Program::run`'s walk.
        let len = bwd.len() as u32;
        let mut born = 0;
        walk.mark_births(births, &mut born, len);
        if let Some(g) = walk.grad_out(loss).ok()? {
            walk.emit(Grad::Seed, g, 0, 0, 0);
        }
        for i in (0..len).rev() {
            walk.mark_births(births, &mut born, i);
            let s = bwd[i as usize];
            if s.runs {
                walk.backward(s).ok()?;
            }
        }
        for i in 0..n_params as u32 {
            if std::mem::take(&mut walk.mark[i as usize]) && walk.gslot[i as usize] != NONE {
                walk.fill(i);
            }
        }
        let mut param_grads = empty(n_params)?;
        param_grads.extend(
            (0..n_params)
                .filter(|&i| walk.touched[i])
                .map(|i| (i as u32, walk.gslot[i], walk.glen[i])),
        );
        Some(Dense {
            fwd: fwd_out,
            bwd: walk.out,
            loads,
            stores,
            param_grads,
            param_state,
            vals: filled(n_vals as usize, 0.0)?,
            grads: filled(n_grads, 0.0)?,
        })
    }

    /// The step's forward and backward, as `Program::run`; false (nothing
    /// done) if a parameter's gradient state is not the one the walk was
    /// resolved for.
    pub(super) fn run<K: OneKernels>(&mut self, ctx: &mut Context, rows: &[Row]) -> bool {
        let table = ctx.table_rows();
        if table.len() < self.param_state.len()
            || table
                .iter()
                .zip(&self.param_state)
                .any(|(e, &(needs, len))| {
                    e.requires_grad != needs || e.unzeroed || e.grad.map(|g| g.len()) != len
                })
        {
            return false;
        }
        let n_params = self.param_state.len();
        let vals = &mut self.vals;
        for &(row, at, slot) in &self.loads {
            let row = row as usize;
            let data = if row < n_params {
                ctx.table_rows()[row].data
            } else {
                rows[row].data
            };
            vals[slot as usize] = ctx.read_only(data)[at as usize];
        }
        for (s, &data) in self.fwd.iter().zip(&self.stores) {
            let (x, y) = (vals[s.a as usize], vals[s.b as usize]);
            let v = match s.code {
                Code::Add => K::forward(OneOp::Binary(BinaryFn::Add), x, y),
                Code::Sub => K::forward(OneOp::Binary(BinaryFn::Sub), x, y),
                Code::Mul => K::forward(OneOp::Binary(BinaryFn::Mul), x, y),
                Code::Div => K::forward(OneOp::Binary(BinaryFn::Div), x, y),
                Code::Op(op) => K::forward(op, x, y),
                Code::Copy => x,
            };
            vals[s.out as usize] = v;
            ctx.access_one(data)[0] = v;
        }
        let grads = &mut self.grads;
        for &(row, start, len) in &self.param_grads {
            if let Some(g) = ctx.table_rows()[row as usize].grad {
                let start = start as usize;
                grads[start..start + len as usize].copy_from_slice(ctx.read_only(g));
            }
        }
        for s in &self.bwd {
            let (d, g) = (s.d as usize, s.g as usize);
            let base = |zero: bool, d: f32| if zero { 0.0 } else { d };
            match s.op {
                Grad::Fill(len) => grads[d..d + len as usize].fill(0.0),
                Grad::Seed => grads[d] += 1.0,
                Grad::AddScaled { k, assign } => {
                    grads[d] = K::add_scaled(grads[d], grads[g], k, assign);
                }
                Grad::GradA { f, zero } => {
                    let v = K::grad_a(f, grads[g], vals[s.a as usize], vals[s.b as usize]);
                    grads[d] = base(zero, grads[d]) + v;
                }
                Grad::GradB { f, zero } => {
                    let v = K::grad_b(f, grads[g], vals[s.a as usize], vals[s.b as usize]);
                    grads[d] = base(zero, grads[d]) + v;
                }
                Grad::MulA { zero } => {
                    let v = K::grad_a(
                        BinaryFn::Mul,
                        grads[g],
                        vals[s.a as usize],
                        vals[s.b as usize],
                    );
                    grads[d] = base(zero, grads[d]) + v;
                }
                Grad::MulB { zero } => {
                    let v = K::grad_b(
                        BinaryFn::Mul,
                        grads[g],
                        vals[s.a as usize],
                        vals[s.b as usize],
                    );
                    grads[d] = base(zero, grads[d]) + v;
                }
                Grad::Unary { f, assign, zero } => {
                    let (x, y) = (vals[s.a as usize], vals[s.b as usize]);
                    let op = OneOp::Unary(f);
                    grads[d] = K::backward(op, assign, base(zero, grads[d]), grads[g], x, y);
                }
                Grad::Map { op, zero } => {
                    let x = vals[s.a as usize];
                    grads[d] = K::backward(op, false, base(zero, grads[d]), grads[g], x, x);
                }
                Grad::Pick { zero } => grads[d] = base(zero, grads[d]) + grads[g],
            }
        }
        for &(row, start, len) in &self.param_grads {
            if let Some(g) = ctx.table_rows()[row as usize].grad {
                let start = start as usize;
                ctx.access_one(g)
                    .copy_from_slice(&grads[start..start + len as usize]);
            }
        }
        ctx.set_backward_done();
        ctx.set_grads_pending(true);
        true
    }
}
