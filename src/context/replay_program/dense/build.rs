//! Building a small step's dense form at capture end: the walk's marks
//! replayed without values.

use super::walk::Walk;
use super::wide::WideF;
use super::{Code, Dense, EscapeF, Fwd, FwdN, Grad};
use crate::arena::Storage;
use crate::context::Context;
use crate::context::replay_program::{Kind, MAXN, Row, Side, Step1};
use crate::ops::OneOp;

/// No slot.
pub(super) const NONE: u32 = u32::MAX;

/// The most elements a vector form's op runs as one instruction per
/// element instead: a vector instruction's call and dispatch cost more
/// than a few one-element ones (a two-element vector form took about 90
/// instructions, a one-element instruction about 20). Measured per
/// gradient: at 3, the mixture's 2- and 3-element vectors 5.5% faster,
/// lkj_prior's 10%; at 8, eight schools' 8-element ones 40% slower.
pub(super) const SHORT_N: u32 = 3;

/// The most elements of a tensor from outside the ops (a parameter, an
/// input, a constant) the value array takes a range for: a larger one
/// (a data set) goes with ops the dense form does not run.
const OUTSIDE_MAX: usize = 256;

/// The most elements of a tensor the ops compute that the value array
/// takes a range for (an element-wise op on more than `MAXN` runs the
/// eager kernels on it, a slice or concat copies runs of it): far below
/// the size at which the eager kernels split an op across threads.
const WIDE_MAX: usize = 4096;

/// The most elements of an op's output the dense form runs it on.
fn output_cap(op: Kind) -> usize {
    match op {
        Kind::Wide(_) | Kind::Slice { .. } | Kind::Join(_) => WIDE_MAX,
        _ => MAXN,
    }
}

/// Pushes `x`, or None if the vector cannot grow (the step then runs the
/// general program).
pub(super) fn push<T>(v: &mut Vec<T>, x: T) -> Option<()> {
    v.try_reserve(1).ok()?;
    v.push(x);
    Some(())
}

/// Per element of a slice's output (`n` elements, rows of `len` taken
/// from rows of `row` at `off`), the input element it copies.
pub(super) fn slice_source(j: u32, row: u32, off: u32, len: u32) -> u32 {
    (j / len) * row + off + j % len
}

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

/// The forward half of the build: value slots (a range per tensor),
/// loads, instructions and stores.
struct Forward<'a> {
    rows: &'a [Row],
    n_params: usize,
    vslot: Vec<u32>,
    /// Per value slot: whether it holds a loaded or computed value.
    set: Vec<bool>,
    loads: Vec<(u32, u32, u32, u32)>,
    stores: Vec<crate::arena::Buf>,
    fwd: Vec<Fwd>,
    fwd_n: Vec<FwdN>,
    wide_f: Vec<WideF>,
    escapes_f: Vec<EscapeF>,
}

impl Forward<'_> {
    fn len(&self, id: u32) -> usize {
        self.rows[id as usize].data.len()
    }

    /// A new range of `n` value slots.
    fn range(&mut self, n: usize) -> Option<u32> {
        let at = self.set.len();
        if at + n > MAX_SLOTS {
            return None;
        }
        self.set.try_reserve(n).ok()?;
        self.set.resize(at + n, false);
        Some(at as u32)
    }

    /// The value slot of element `e` of operand `x`: a tensor from
    /// outside the ops gets its range at its first use and each element
    /// is read in at its own.
    fn operand(&mut self, x: u32, e: u32) -> Option<u32> {
        let i = x as usize;
        if self.vslot[i] == NONE {
            let n = self.len(x);
            if n > OUTSIDE_MAX {
                return None;
            }
            self.vslot[i] = self.range(n)?;
        }
        let slot = self.vslot[i] + e;
        if !self.set[slot as usize] {
            // Runs of consecutive elements load as one copy.
            match self.loads.last_mut() {
                Some((r, at, to, n)) if *r == x && *at + *n == e && *to + *n == slot => *n += 1,
                _ => push(&mut self.loads, (x, e, slot, 1))?,
            }
            self.set[slot as usize] = true;
        }
        Some(slot)
    }

    /// One instruction computing element `e` of `out`.
    fn emit(&mut self, code: Code, out: u32, e: u32, a: u32, b: u32) -> Option<()> {
        let slot = self.store(out, e, 1)?;
        push(
            &mut self.fwd,
            Fwd {
                code,
                out: slot,
                a,
                b,
            },
        )
    }

    /// Elements `e..e + n` of `out` computed: their store; their first
    /// value slot.
    fn store(&mut self, out: u32, e: u32, n: u32) -> Option<u32> {
        let slot = self.vslot[out as usize] + e;
        self.set[slot as usize..][..n as usize].fill(true);
        let data = self.rows[out as usize].data;
        push(&mut self.stores, Storage::sub(data, e as usize, n as usize))?;
        Some(slot)
    }

    /// One vector form computing `n` elements of `out` from element `e`
    /// on by `op` (a copy if None), its operands' strides `sa` and `sb`.
    fn emit_n(
        &mut self,
        op: Option<OneOp>,
        (out, e): (u32, u32),
        (a, b): (u32, u32),
        n: u32,
        [sa, sb]: [u8; 2],
    ) -> Option<()> {
        if n <= SHORT_N {
            // One instruction per element (see SHORT_N).
            for i in 0..n {
                let (ai, bi) = (a + i * sa as u32, b + i * sb as u32);
                let code = op.map_or(Code::Copy, Code::Op);
                self.emit(code, out, e + i, ai, bi)?;
            }
            return Some(());
        }
        let slot = self.store(out, e, n)?;
        let s = FwdN {
            op,
            out: slot,
            a,
            b,
            n,
            sa,
            sb,
        };
        push(&mut self.fwd_n, s)?;
        let code = Code::Vector(self.fwd_n.len() as u32 - 1);
        push(
            &mut self.fwd,
            Fwd {
                code,
                out: slot,
                a,
                b,
            },
        )
    }

    /// A copy of `n` consecutive elements of `x` from `from` into `out`'s
    /// from `e`.
    fn copy_run(&mut self, (out, e): (u32, u32), x: u32, from: u32, n: u32) -> Option<()> {
        for i in 0..n {
            self.operand(x, from + i)?;
        }
        let a = self.operand(x, from)?;
        if n == 1 {
            return self.emit(Code::Copy, out, e, a, a);
        }
        self.emit_n(None, (out, e), (a, a), n, [1, 1])
    }

    /// An op the dense form does not run: the general program's forward,
    /// then its output's values read in if `load` (a dense instruction
    /// reads them).
    fn escape(&mut self, s: &Step1, load: bool) -> Option<()> {
        let data = self.rows[s.out as usize].data;
        let load = if load {
            let n = data.len();
            let slot = self.range(n)?;
            self.vslot[s.out as usize] = slot;
            self.set[slot as usize..][..n].fill(true);
            Some((slot, n as u32))
        } else {
            None
        };
        push(&mut self.escapes_f, EscapeF { step: *s, load })?;
        push(&mut self.stores, data)?;
        let code = Code::Escape(self.escapes_f.len() as u32 - 1);
        let s = Fwd {
            code,
            out: 0,
            a: 0,
            b: 0,
        };
        push(&mut self.fwd, s)
    }

    /// One op's forward, element by element.
    fn op(&mut self, s: &Step1, side: &Side) -> Option<()> {
        let out = s.out as usize;
        let n = self.len(s.out);
        if self.vslot[out] != NONE || out < self.n_params || n > output_cap(s.op) {
            return None;
        }
        self.vslot[out] = self.range(n)?;
        let n = n as u32;
        match s.op {
            Kind::One(op) => {
                let (a, b) = (self.operand(s.a, 0)?, self.operand(s.b, 0)?);
                self.emit(Code::Op(op), s.out, 0, a, b)?;
            }
            Kind::Map(op) => {
                for i in 0..n {
                    self.operand(s.a, i)?;
                }
                let a = self.operand(s.a, 0)?;
                self.emit_n(Some(op), (s.out, 0), (a, a), n, [1, 1])?;
            }
            Kind::Wide(k) => {
                for x in [s.a, s.b] {
                    for i in 0..self.len(x) as u32 {
                        self.operand(x, i)?;
                    }
                }
                let (a, b) = (self.operand(s.a, 0)?, self.operand(s.b, 0)?);
                let out = self.store(s.out, 0, n)?;
                push(&mut self.wide_f, WideF { wide: k, out, a, b })?;
                let code = Code::Wide(self.wide_f.len() as u32 - 1);
                push(&mut self.fwd, Fwd { code, out, a, b })?;
            }
            Kind::Bin(f, k) => {
                let m = &side.bcast[k as usize];
                let op = OneOp::Binary(f);
                if let Some((sa, sb)) = m.strides() {
                    for o in 0..n as usize {
                        self.operand(s.a, m.ia[o] as u32)?;
                        self.operand(s.b, m.ib[o] as u32)?;
                    }
                    let (a, b) = (self.operand(s.a, 0)?, self.operand(s.b, 0)?);
                    return self.emit_n(Some(op), (s.out, 0), (a, b), n, [sa, sb]);
                }
                for o in 0..n {
                    let a = self.operand(s.a, m.ia[o as usize] as u32)?;
                    let b = self.operand(s.b, m.ib[o as usize] as u32)?;
                    self.emit(Code::Op(OneOp::Binary(f)), s.out, o, a, b)?;
                }
            }
            Kind::Sum(mean) => {
                let len = self.len(s.a) as u32;
                for i in 0..len {
                    self.operand(s.a, i)?;
                }
                let a = self.operand(s.a, 0)?;
                self.emit(Code::Sum { n: len, mean }, s.out, 0, a, a)?;
            }
            Kind::Pick(at) => {
                let a = self.operand(s.a, at)?;
                self.emit(Code::Copy, s.out, 0, a, a)?;
            }
            Kind::Slice { row, off, len } => {
                for r in 0..n / len {
                    self.copy_run((s.out, r * len), s.a, r * row + off, len)?;
                }
            }
            Kind::Join(k) => {
                let m = side.joins[k as usize];
                let mut off = 0;
                for (&x, &len) in m.xs.iter().zip(&m.lens).take(m.n as usize) {
                    for r in 0..self.len(x) as u32 / len {
                        self.copy_run((s.out, r * m.row + off), x, r * len, len)?;
                    }
                    off += len;
                }
            }
            _ => return None,
        }
        Some(())
    }
}

impl Dense {
    /// The compact program of a step with small ops, its other ops as
    /// escapes, or None for a step with none (or one whose walk reads a
    /// gradient slot before writing it, which the plan never makes).
    pub(in crate::context::replay_program) fn build(
        ctx: &Context,
        (fwd, bwd, side): (&[Step1], &[Step1], &Side),
        births: &[(u32, u32)],
        rows: &[Row],
        loss: u32,
    ) -> Option<Dense> {
        let n_params = ctx.param_count();
        let table = ctx.table_rows();
        let n = rows.len();
        let len = |id: u32| rows[id as usize].data.len();
        // Which ops the dense form runs: small ones on small tensors; the
        // others are escapes (`escaped` marks their outputs).
        let operands = |s: &Step1| {
            let mut xs = [s.a, s.b, s.a, s.a, s.a, s.a, s.a, s.a];
            let k = match s.op {
                Kind::Join(k) => {
                    let m = &side.joins[k as usize];
                    xs.copy_from_slice(&m.xs);
                    m.n as usize
                }
                _ => 2,
            };
            (xs, k)
        };
        // A tensor from outside the ops is read in element by element (at
        // most OUTSIDE_MAX); one an op computes has its range (at most
        // WIDE_MAX).
        let mut computed = filled(n, false)?;
        for s in fwd {
            computed[s.out as usize] = true;
        }
        let small = |s: &Step1| {
            let (xs, k) = operands(s);
            matches!(
                s.op,
                Kind::One(_)
                    | Kind::Map(_)
                    | Kind::Bin(..)
                    | Kind::Wide(_)
                    | Kind::Sum(_)
                    | Kind::Pick(_)
                    | Kind::Slice { .. }
                    | Kind::Join(_)
            ) && len(s.out) <= output_cap(s.op)
                && s.out as usize >= n_params
                && xs[..k].iter().all(|&x| {
                    len(x)
                        <= if computed[x as usize] {
                            WIDE_MAX
                        } else {
                            OUTSIDE_MAX
                        }
                })
        };
        let mut escaped = filled(n, false)?;
        for s in fwd.iter().filter(|s| !small(s)) {
            escaped[s.out as usize] = true;
        }
        // Escapes pay off with enough small ops around them: a small op in
        // the dense form saves about a hundred instructions of the general
        // program's, an escape costs its gradients' copies to and from
        // their buffers, several for a matrix op (an eager op lends all its
        // rows). Measured per posteriordb model (callgrind, per gradient):
        // 10 small ops with one eager escape gain, 5 lose; 10 to 18 with 3
        // to 5 eager ones (the Cholesky models) lose. A wide op saves its
        // eager entry points' bookkeeping, several hundred: it counts as
        // eight against the eager ops (hier_lkj's 22 small and 4 wide ops
        // around 4 eager ones gain 3%), not towards the ten (a GLM with a
        // wide op and 5 small ones loses 1%).
        let small_ops = fwd.iter().filter(|s| !escaped[s.out as usize]).count();
        let escapes = fwd.len() - small_ops;
        let eager = fwd
            .iter()
            .filter(|s| matches!(s.op, Kind::Eager(_)))
            .count();
        let wide_ops = fwd
            .iter()
            .filter(|s| !escaped[s.out as usize] && matches!(s.op, Kind::Wide(_)))
            .count();
        let worth = small_ops + 8 * wide_ops;
        // With every tensor small an escape's copies are short: the eager ops
        // need no count of small ones around them (lkj_prior's 10 small ops
        // around 3 eager ones, mvn_lkj's 19 around 5: 5-6% faster per
        // gradient in time, though callgrind counts 1% more instructions).
        let all_small = rows.iter().all(|r| r.data.len() <= WIDE_MAX);
        if small_ops == 0 || (escapes > 0 && (small_ops < 10 || (!all_small && worth < 8 * eager)))
        {
            return None;
        }
        // An escape's output a dense instruction reads (or the loss) is
        // read into the value array after it.
        let mut load = filled(n, false)?;
        for s in fwd.iter().filter(|s| !escaped[s.out as usize]) {
            let (xs, k) = operands(s);
            for &x in &xs[..k] {
                load[x as usize] = escaped[x as usize];
            }
        }
        load[loss as usize] = escaped[loss as usize];
        let mut f = Forward {
            rows,
            n_params,
            vslot: filled(n, NONE)?,
            set: Vec::new(),
            loads: Vec::new(),
            stores: Vec::new(),
            fwd: Vec::new(),
            fwd_n: Vec::new(),
            wide_f: Vec::new(),
            escapes_f: Vec::new(),
        };
        for s in fwd {
            if escaped[s.out as usize] {
                f.escape(s, load[s.out as usize])?;
            } else {
                f.op(s, side)?;
            }
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
            // The dense array holds the gradients of the tensors it holds
            // values of, and the parameters'; escapes' others stay in
            // their buffers.
            let held = i < n_params || f.vslot[i] != NONE;
            if let Some(g) = grad.filter(|_| held) {
                if n_grads + g.len() > MAX_SLOTS {
                    return None;
                }
                gslot[i] = n_grads as u32;
                glen[i] = g.len() as u32;
                n_grads += g.len();
            }
        }
        let mut vlen = filled(n, 0u32)?;
        for (v, row) in vlen.iter_mut().zip(rows) {
            // Within MAX_ELEMENTS < 2^31: fits.
            *v = row.data.len() as u32;
        }
        let mut defined = filled(n, false)?;
        defined[..n_params].fill(true);
        let mut has_grad = filled(n, false)?;
        for (h, row) in has_grad.iter_mut().zip(rows) {
            *h = row.grad.is_some();
        }
        let mut walk = Walk {
            n_params,
            side,
            escaped,
            has_grad,
            escapes_b: Vec::new(),
            gslot,
            glen,
            vslot: f.vslot,
            vlen,
            needs,
            mark: filled(n, false)?,
            defined,
            touched: filled(n_params, false)?,
            out: Vec::new(),
            out_n: Vec::new(),
            out_w: Vec::new(),
        };
        // As `Program::run`'s walk.
        let len = bwd.len() as u32;
        let mut born = 0;
        walk.mark_births(births, &mut born, len).ok()?;
        if let Some(g) = walk.grad_out(loss).ok()? {
            walk.emit(Grad::Seed, g, 0, 0, 0).ok()?;
        }
        for i in (0..len).rev() {
            walk.mark_births(births, &mut born, i).ok()?;
            let s = bwd[i as usize];
            if s.runs {
                walk.backward(s).ok()?;
            }
        }
        for i in 0..n_params as u32 {
            if std::mem::take(&mut walk.mark[i as usize]) && walk.gslot[i as usize] != NONE {
                walk.fill(i).ok()?;
            }
        }
        let mut param_grads = empty(n_params)?;
        param_grads.extend(
            (0..n_params)
                .filter(|&i| walk.touched[i])
                .map(|i| (i as u32, walk.gslot[i], walk.glen[i])),
        );
        Some(Dense {
            vals: filled(f.set.len(), 0.0)?,
            fwd: f.fwd,
            bwd: walk.out,
            fwd_n: f.fwd_n,
            bwd_n: walk.out_n,
            wide_f: f.wide_f,
            wide_b: walk.out_w,
            escapes_f: f.escapes_f,
            escapes_b: walk.escapes_b,
            loads: f.loads,
            stores: f.stores,
            param_grads,
            param_state,
            grads: filled(n_grads, 0.0)?,
        })
    }
}
