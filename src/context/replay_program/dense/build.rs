//! Building a scalar step's dense form at capture end: the walk's marks
//! replayed without values.

use super::{Bwd, Code, Dense, Fwd, Grad};
use crate::context::Context;
use crate::context::replay_program::{Kind, Row, Step1};
use crate::ops::OneOp;

/// No slot.
const NONE: u32 = u32::MAX;

/// The most gradient elements the arrays hold (parameters' included).
const MAX_SLOTS: usize = 1 << 20;

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
                    self.emit(Grad::GradA { f, zero }, d, dout, va, vb);
                }
                if let Some((d, zero)) = self.grad_of(s.b)? {
                    self.written(s.b);
                    self.emit(Grad::GradB { f, zero }, d, dout, va, vb);
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
    pub(in crate::context::replay_program) fn build(
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
                Kind::One(op) => Code::Op(op),
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
}
