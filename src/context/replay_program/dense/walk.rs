//! The backward half of a small step's dense form at capture end: the
//! walk's marks replayed without values, each gradient access written
//! down as an instruction.

use super::build::{NONE, SHORT_N, push, slice_source};
use super::wide::{WideB, WideGrad};
use super::{Bwd, BwdN, EscapeB, Grad};
use crate::context::replay_program::{Kind, Side, Step1};
use crate::ops::{OneOp, UnaryFn};

/// The walk's marks as `run` keeps them, replayed without values at
/// capture, emitting what each gradient access does.
pub(super) struct Walk<'a> {
    pub(super) n_params: usize,
    /// The program's side tables (broadcasts, concats).
    pub(super) side: &'a Side,
    /// Per row: an escape made it.
    pub(super) escaped: Vec<bool>,
    /// Per row: it has a gradient buffer (activations).
    pub(super) has_grad: Vec<bool>,
    pub(super) escapes_b: Vec<EscapeB>,
    /// Per row: its first gradient slot, or NONE (no gradient buffer).
    pub(super) gslot: Vec<u32>,
    pub(super) glen: Vec<u32>,
    /// Per row: its first value slot, or NONE.
    pub(super) vslot: Vec<u32>,
    /// Per row: its elements.
    pub(super) vlen: Vec<u32>,
    pub(super) needs: Vec<bool>,
    pub(super) mark: Vec<bool>,
    /// The slot holds a value the walk wrote (or, for a parameter, the
    /// table's): reading it before that would read a stale slot.
    pub(super) defined: Vec<bool>,
    pub(super) touched: Vec<bool>,
    pub(super) out: Vec<Bwd>,
    pub(super) out_n: Vec<BwdN>,
    pub(super) out_w: Vec<WideB>,
}

/// A capture-time refusal: the step runs the general program.
pub(super) struct Refused;

/// Where a unary op's backward writes (see `Walk::unary_target`): the
/// output's gradient slot `dout`, the input's `d`, and how the write
/// starts.
struct UnaryTarget {
    dout: u32,
    d: u32,
    assign: bool,
    zero: bool,
}

impl Walk<'_> {
    pub(super) fn emit(&mut self, op: Grad, d: u32, g: u32, a: u32, b: u32) -> Result<(), Refused> {
        push(&mut self.out, Bwd { op, d, g, a, b }).ok_or(Refused)
    }

    /// A vector form: `n` elements, strides `[sd, sa, sb]` as `Bwd`'s.
    fn emit_n(
        &mut self,
        op: Grad,
        d: u32,
        g: u32,
        (a, b): (u32, u32),
        (n, [sd, sa, sb]): (u32, [u8; 3]),
    ) -> Result<(), Refused> {
        if n <= SHORT_N {
            // One instruction per element (see SHORT_N); a zero fill is
            // the first write's.
            for i in 0..n {
                let first = i == 0;
                let one = match op {
                    Grad::AddScaledN { k, assign } => Grad::AddScaled { k, assign },
                    Grad::BinaryAN { f, zero } => Grad::GradA {
                        f,
                        zero: zero && first,
                    },
                    Grad::BinaryBN { f, zero } => Grad::GradB {
                        f,
                        zero: zero && first,
                    },
                    Grad::UnaryN { f, assign, zero } => Grad::Unary { f, assign, zero },
                    Grad::MapN { op } => Grad::Map { op, zero: false },
                    Grad::PickN => Grad::Pick { zero: false },
                    _ => return Err(Refused),
                };
                let at = |x: u32, s: u8| x + i * s as u32;
                self.emit(one, at(d, sd), g + i, at(a, sa), at(b, sb))?;
            }
            return Ok(());
        }
        let s = BwdN {
            op,
            d,
            g,
            a,
            b,
            n,
            sd,
            sa,
            sb,
        };
        push(&mut self.out_n, s).ok_or(Refused)?;
        let k = Grad::Vector(self.out_n.len() as u32 - 1);
        self.emit(k, d, g, a, b)
    }

    /// A wide op's kernel on `n` output gradients.
    fn emit_wide(
        &mut self,
        op: WideGrad,
        d: u32,
        g: u32,
        (a, b): (u32, u32),
        n: u32,
    ) -> Result<(), Refused> {
        push(&mut self.out_w, WideB { op, d, g, a, b, n }).ok_or(Refused)?;
        let k = Grad::Wide(self.out_w.len() as u32 - 1);
        self.emit(k, d, g, a, b)
    }

    fn touch(&mut self, id: u32) {
        if (id as usize) < self.n_params {
            self.touched[id as usize] = true;
        }
    }

    /// As `Program::mark_births`: a gradient the dense array does not
    /// hold is marked at replay, in the program's rows.
    pub(super) fn mark_births(
        &mut self,
        births: &[(u32, u32)],
        next: &mut usize,
        at: u32,
    ) -> Result<(), Refused> {
        while let Some(&(pos, t)) = births.get(*next) {
            if pos < at {
                break;
            }
            if self.gslot[t as usize] != NONE {
                self.mark[t as usize] = true;
            } else if self.has_grad[t as usize] {
                self.emit(Grad::Birth, t, 0, 0, 0)?;
            }
            *next += 1;
        }
        Ok(())
    }

    /// An escape's backward: the gradients it reads written to their
    /// buffers, those it writes read back (see `EscapeB`).
    fn escape(&mut self, s: Step1) -> Result<(), Refused> {
        let mut inputs = [s.a, s.b, s.a, s.a, s.a, s.a, s.a, s.a, s.a];
        let k = match s.op {
            Kind::Join(k) => {
                let m = &self.side.joins[k as usize];
                inputs[..m.xs.len()].copy_from_slice(&m.xs);
                m.n as usize
            }
            Kind::Eager(k) => {
                let e = &self.side.eager[k as usize];
                for (x, &(_, root)) in inputs.iter_mut().zip(&e.lend[1..e.n as usize]) {
                    *x = root;
                }
                e.n as usize - 1
            }
            _ => 2,
        };
        let mut before = Vec::new();
        let mut after = Vec::new();
        let rows = std::iter::once(s.out).chain(inputs[..k].iter().copied());
        for (i, r) in rows.enumerate() {
            let ri = r as usize;
            let (slot, len) = (self.gslot[ri], self.glen[ri]);
            if slot == NONE || before.iter().any(|&(x, _, _)| x == r) {
                continue;
            }
            if i == 0 && !self.mark[ri] && !self.defined[ri] {
                return Err(Refused);
            }
            let sync = self.defined[ri].then_some((slot, len));
            push(&mut before, (r, self.mark[ri], sync)).ok_or(Refused)?;
            self.touch(r);
            // The output's gradient is settled; each input needing one is
            // written (or stays born: `Dense::escape` reads zeros then).
            if i == 0 {
                self.mark[ri] = false;
            } else if self.needs[ri] {
                self.mark[ri] = false;
                self.defined[ri] = true;
                push(&mut after, (r, slot, len)).ok_or(Refused)?;
            }
        }
        let e = EscapeB {
            step: s,
            before,
            after,
        };
        push(&mut self.escapes_b, e).ok_or(Refused)?;
        let k = self.escapes_b.len() as u32 - 1;
        self.emit(Grad::Escape(k), 0, 0, 0, 0)
    }

    /// A zero fill of `id`'s whole slot, as `settle` does.
    pub(super) fn fill(&mut self, id: u32) -> Result<(), Refused> {
        let i = id as usize;
        self.emit(Grad::Fill(self.glen[i]), self.gslot[i], 0, 0, 0)?;
        self.defined[i] = true;
        self.touch(id);
        Ok(())
    }

    /// As `grad_out`: the slot read, settled first.
    pub(super) fn grad_out(&mut self, id: u32) -> Result<Option<u32>, Refused> {
        let i = id as usize;
        if std::mem::take(&mut self.mark[i]) && self.gslot[i] != NONE {
            self.fill(id)?;
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
            self.fill(id)?;
            zero = false;
        }
        if !zero && !self.defined[i] {
            return Err(Refused);
        }
        self.touch(id);
        Ok(Some((self.gslot[i], zero)))
    }

    /// A write of `grad_of`'s slot that did not happen: its fill did.
    fn unwritten(&mut self, id: u32, g: Option<(u32, bool)>) -> Result<(), Refused> {
        if let Some((_, true)) = g {
            self.fill(id)?;
        }
        Ok(())
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

    /// A write of all `n` elements of `grad_to_overwrite`'s slot:
    /// overwriting (fresh) or adding to a defined value.
    fn overwrite(&mut self, id: u32, fresh: bool, n: u32) -> Result<(), Refused> {
        let i = id as usize;
        if !fresh && !self.defined[i] {
            return Err(Refused);
        }
        if self.glen[i] != n {
            return Err(Refused);
        }
        self.defined[i] = true;
        self.touch(id);
        Ok(())
    }

    /// A unary op's backward lookups, in the walk's order: its output's
    /// gradient slot, then its input's slot to write (all `n` elements),
    /// and whether that write assigns (a fresh slot the function
    /// overwrites) or starts from zero (fresh, adding); None where either
    /// has no gradient.
    fn unary_target(
        &mut self,
        s: Step1,
        f: UnaryFn,
        n: u32,
    ) -> Result<Option<UnaryTarget>, Refused> {
        let Some(dout) = self.grad_out(s.out)? else {
            return Ok(None);
        };
        let Some((d, fresh)) = self.grad_to_overwrite(s.a) else {
            return Ok(None);
        };
        self.overwrite(s.a, fresh, n)?;
        let assign = fresh && f.assigns_fresh_grad();
        Ok(Some(UnaryTarget {
            dout,
            d,
            assign,
            zero: fresh && !assign,
        }))
    }

    /// Value slot of element `e` of `id`.
    fn value(&self, id: u32, e: u32) -> Result<u32, Refused> {
        match self.vslot[id as usize] {
            NONE => Err(Refused),
            v => Ok(v + e),
        }
    }

    /// The elements of a row (its value and gradient ranges' length).
    fn len(&self, id: u32) -> u32 {
        self.vlen[id as usize]
    }

    /// Writes of `grad_of`'s slot `d` at offsets `at`, each adding
    /// `op(zero)`: a folded zero fill (one-element slot) goes with the
    /// first write, which is to that one element.
    fn adds(
        &mut self,
        (d, zero): (u32, bool),
        at: impl Iterator<Item = (u32, u32, u32, u32)>,
        op: impl Fn(bool) -> Grad,
    ) -> Result<(), Refused> {
        let mut zero = zero;
        for (k, g, a, b) in at {
            self.emit(op(zero), d + k, g, a, b)?;
            zero = false;
        }
        Ok(())
    }

    /// One op's backward, as `Program::backward` does it for the kinds
    /// a dense step has, element by element.
    pub(super) fn backward(&mut self, s: Step1) -> Result<(), Refused> {
        if self.escaped[s.out as usize] {
            return self.escape(s);
        }
        let n_out = self.len(s.out);
        match s.op {
            Kind::One(OneOp::Binary(f)) | Kind::Bin(f, _) => {
                let Some(dout) = self.grad_out(s.out)? else {
                    return Ok(());
                };
                if let Some(sign) = f.sum_sign()
                    && s.same
                {
                    let (ga, gb) = (self.grad_to_overwrite(s.a), self.grad_to_overwrite(s.b));
                    for (x, grad, k) in [(s.a, ga, 1.0), (s.b, gb, sign)] {
                        if let Some((d, fresh)) = grad {
                            self.overwrite(x, fresh, n_out)?;
                            if n_out > 1 {
                                let op = Grad::AddScaledN { k, assign: fresh };
                                self.emit_n(op, d, dout, (0, 0), (n_out, [1, 0, 0]))?;
                            } else {
                                self.emit(Grad::AddScaled { k, assign: fresh }, d, dout, 0, 0)?;
                            }
                        }
                    }
                    return Ok(());
                }
                // Per output element, the operands' elements it read.
                let side = self.side;
                let ix = |o: u32| match s.op {
                    Kind::Bin(_, k) => {
                        let m = &side.bcast[k as usize];
                        (m.ia[o as usize] as u32, m.ib[o as usize] as u32)
                    }
                    _ => (0, 0),
                };
                let (va, vb) = (self.value(s.a, 0)?, self.value(s.b, 0)?);
                if let (Kind::Bin(_, k), true) = (s.op, n_out > 1)
                    && let Some((sa, sb)) = side.bcast[k as usize].strides()
                {
                    for (x, sd, into_a) in [(s.a, sa, true), (s.b, sb, false)] {
                        let Some((d, zero)) = self.grad_of(x)? else {
                            continue;
                        };
                        // A folded zero fill is a one-element slot's: a
                        // broadcast operand's (stride 0).
                        if zero && sd != 0 {
                            return Err(Refused);
                        }
                        self.written(x);
                        let op = if into_a {
                            Grad::BinaryAN { f, zero }
                        } else {
                            Grad::BinaryBN { f, zero }
                        };
                        self.emit_n(op, d, dout, (va, vb), (n_out, [sd, sa, sb]))?;
                    }
                    return Ok(());
                }
                let at = |into_a: bool| {
                    (0..n_out).map(move |o| {
                        let (i, j) = ix(o);
                        (if into_a { i } else { j }, dout + o, va + i, vb + j)
                    })
                };
                if let Some(d) = self.grad_of(s.a)? {
                    self.written(s.a);
                    self.adds(d, at(true), |zero| Grad::GradA { f, zero })?;
                }
                if let Some(d) = self.grad_of(s.b)? {
                    self.written(s.b);
                    self.adds(d, at(false), |zero| Grad::GradB { f, zero })?;
                }
            }
            Kind::One(OneOp::Unary(f)) | Kind::Map(OneOp::Unary(f)) => {
                let Some(t) = self.unary_target(s, f, n_out)? else {
                    return Ok(());
                };
                let (assign, zero) = (t.assign, t.zero);
                let (x, y) = (self.value(s.a, 0)?, self.value(s.out, 0)?);
                if n_out > 1 {
                    let op = Grad::UnaryN { f, assign, zero };
                    self.emit_n(op, t.d, t.dout, (x, y), (n_out, [1, 1, 1]))?;
                } else {
                    self.emit(Grad::Unary { f, assign, zero }, t.d, t.dout, x, y)?;
                }
            }
            Kind::One(op) | Kind::Map(op) => {
                // Both looked up, in this order, as `Program::backward`.
                let (dx, dout) = (self.grad_of(s.a)?, self.grad_out(s.out)?);
                let (Some(d), Some(dout)) = (dx, dout) else {
                    return self.unwritten(s.a, dx);
                };
                self.written(s.a);
                let x = self.value(s.a, 0)?;
                if n_out > 1 && !d.1 {
                    return self.emit_n(Grad::MapN { op }, d.0, dout, (x, x), (n_out, [1, 1, 1]));
                }
                let at = (0..n_out).map(|i| (i, dout + i, x + i, x + i));
                self.adds(d, at, |zero| Grad::Map { op, zero })?;
            }
            Kind::Sum(mean) => {
                let (dx, dout) = (self.grad_of(s.a)?, self.grad_out(s.out)?);
                let (Some((d, zero)), Some(dout)) = (dx, dout) else {
                    return self.unwritten(s.a, dx);
                };
                if zero {
                    // The kernel adds: the fill first.
                    self.fill(s.a)?;
                }
                self.written(s.a);
                let n = self.len(s.a);
                self.emit(Grad::SumBack { n, mean }, d, dout, 0, 0)?;
            }
            Kind::Pick(at) => {
                let (dx, dout) = (self.grad_of(s.a)?, self.grad_out(s.out)?);
                let (Some((d, zero)), Some(dout)) = (dx, dout) else {
                    return self.unwritten(s.a, dx);
                };
                if at >= self.glen[s.a as usize] {
                    return Err(Refused);
                }
                self.written(s.a);
                self.emit(Grad::Pick { zero }, d + at, dout, 0, 0)?;
            }
            Kind::Slice { row, off, len } => {
                let (dx, dout) = (self.grad_of(s.a)?, self.grad_out(s.out)?);
                let (Some(d), Some(dout)) = (dx, dout) else {
                    return self.unwritten(s.a, dx);
                };
                self.written(s.a);
                if len > 1 && !d.1 {
                    // A run per row of the output.
                    for r in 0..n_out / len {
                        let (dr, gr) = (d.0 + r * row + off, dout + r * len);
                        self.emit_n(Grad::PickN, dr, gr, (0, 0), (len, [1, 0, 0]))?;
                    }
                    return Ok(());
                }
                let at = (0..n_out).map(|j| (slice_source(j, row, off, len), dout + j, 0, 0));
                self.adds(d, at, |zero| Grad::Pick { zero })?;
            }
            Kind::Join(k) => {
                let Some(dout) = self.grad_out(s.out)? else {
                    return Ok(());
                };
                let m = self.side.joins[k as usize];
                let mut off = 0;
                for (&x, &len) in m.xs.iter().zip(&m.lens).take(m.n as usize) {
                    if let Some(d) = self.grad_of(x)? {
                        self.written(x);
                        if len > 1 && !d.1 {
                            // A run per row of the input.
                            for r in 0..self.len(x) / len {
                                let (dr, gr) = (d.0 + r * len, dout + r * m.row + off);
                                self.emit_n(Grad::PickN, dr, gr, (0, 0), (len, [1, 0, 0]))?;
                            }
                        } else {
                            // Input element i is output element (i / len) *
                            // row + off + i % len.
                            let at = (0..self.len(x))
                                .map(|i| (i, dout + slice_source(i, m.row, off, len), 0, 0));
                            self.adds(d, at, |zero| Grad::Pick { zero })?;
                        }
                    }
                    off += len;
                }
            }
            Kind::Wide(k) => return self.wide(s, k, n_out),
            _ => return Err(Refused),
        }
        Ok(())
    }

    /// `grad_of`'s slot with its zero fill emitted (a wide op's kernels
    /// add to the whole slot).
    fn grad_of_filled(&mut self, id: u32) -> Result<Option<u32>, Refused> {
        let Some((d, zero)) = self.grad_of(id)? else {
            return Ok(None);
        };
        if zero {
            self.fill(id)?;
        }
        self.written(id);
        Ok(Some(d))
    }

    /// A wide op's backward, as `Program::backward_wide`: the same
    /// lookups in the same order, then its kernels on the ranges.
    fn wide(&mut self, s: Step1, k: u32, n_out: u32) -> Result<(), Refused> {
        let (va, vb) = (self.value(s.a, 0)?, self.value(s.b, 0)?);
        match self.side.wide[k as usize].op {
            OneOp::Binary(f) => {
                let Some(dout) = self.grad_out(s.out)? else {
                    return Ok(());
                };
                if let Some(sign) = f.sum_sign()
                    && s.same
                {
                    let (ga, gb) = (self.grad_to_overwrite(s.a), self.grad_to_overwrite(s.b));
                    for (x, grad, k) in [(s.a, ga, 1.0), (s.b, gb, sign)] {
                        if let Some((d, fresh)) = grad {
                            self.overwrite(x, fresh, n_out)?;
                            let op = WideGrad::AddScaled { k, assign: fresh };
                            self.emit_wide(op, d, dout, (0, 0), n_out)?;
                        }
                    }
                    return Ok(());
                }
                for (x, into_a) in [(s.a, true), (s.b, false)] {
                    if let Some(d) = self.grad_of_filled(x)? {
                        let op = WideGrad::Binary(k, into_a);
                        self.emit_wide(op, d, dout, (va, vb), n_out)?;
                    }
                }
            }
            OneOp::Unary(f) => {
                let Some(t) = self.unary_target(s, f, n_out)? else {
                    return Ok(());
                };
                let (assign, zero) = (t.assign, t.zero);
                let y = self.value(s.out, 0)?;
                let op = WideGrad::Unary { f, assign, zero };
                self.emit_wide(op, t.d, t.dout, (va, y), n_out)?;
            }
            op => {
                // Both looked up, in this order, as `backward_wide`.
                let dx = self.grad_of(s.a)?;
                let dout = self.grad_out(s.out)?;
                let (Some((d, zero)), Some(dout)) = (dx, dout) else {
                    return self.unwritten(s.a, dx);
                };
                if zero {
                    self.fill(s.a)?;
                }
                self.written(s.a);
                self.emit_wide(WideGrad::Map(op), d, dout, (va, va), n_out)?;
            }
        }
        Ok(())
    }
}
