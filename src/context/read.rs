//! Reading a tensor: its shape, values and gradient, and the calls that
//! decide which gradients there are to read (keeping an activation's past
//! backward, clearing the parameters'). Its own room: the caller's side of
//! the table, with errors that say what to do instead.

use super::{Context, Tensor, TensorEntry};
use crate::arena::Buf;
use crate::error::{Error, Result};
use crate::shape::Shape;

impl Context {
    pub fn shape(&self, t: Tensor) -> Result<Shape> {
        self.shape_for("tensor_shape", t)
    }

    /// The element count of `t`.
    pub fn numel(&self, t: Tensor) -> Result<usize> {
        Ok(self.shape_for("tensor_numel", t)?.numel())
    }

    pub(crate) fn shape_for(&self, op: &'static str, t: Tensor) -> Result<Shape> {
        let id = self.resolve(op, t)?;
        Ok(self.entry(id).shape)
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
        let e = self.entry(id);
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
        out.copy_from_slice(self.read_only(buf));
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
        } else if !self.backward_done() {
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
        if (id as usize) < self.param_count() {
            return Ok(());
        }
        let e = self.entry(id);
        if !e.requires_grad {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!(
                    "tensor {} does not require a gradient (a constant, or made with grad mode off)",
                    e.shape
                ),
            });
        }
        if self.backward_done() {
            return Err(Error::Sequence {
                op: OP,
                what: "backward already ran this iteration; call ag_tensor_retain_grad before ag_backward".into(),
            });
        }
        let root = e.view_of.unwrap_or(id);
        self.entry_mut(id).retain = true;
        self.entry_mut(root).retain = true;
        Ok(())
    }

    /// Reads a one-element tensor.
    pub fn item(&self, t: Tensor) -> Result<f32> {
        let mut v = [0.0f32];
        self.read_buf("tensor_item", t, &mut v, false)?;
        Ok(v[0])
    }

    /// Clears every parameter gradient (large ones across the pool).
    pub fn zero_grad(&mut self) {
        for i in 0..self.param_count() as u32 {
            if let Some(g) = self.entry(i).grad {
                self.zero_fill(g);
            }
        }
        self.set_grads_pending(false);
    }

    /// Fills `g` with zeros, across the pool when it is large: a language
    /// model's logit gradient is 200 MB, whose fill on one thread took
    /// most of its loss's backward at 16 threads.
    pub(crate) fn zero_fill(&mut self, g: Buf) {
        // A store per element costs about a quarter of an element-wise
        // op's element: fills of 2 MB and more are split, 256 KB a task
        // at least.
        const MIN_TASK_FLOATS: usize = 1 << 16;
        let par = self.want_pool(g.len() * 4);
        let (pool, [g], []) = self.access_on(par, [g], []);
        match pool {
            Some(pool) => {
                let n = crate::pool::task_count(g.len(), MIN_TASK_FLOATS);
                pool.run_chunks(g, g.len().div_ceil(n), &|_, part| part.fill(0.0));
            }
            None => crate::kernels::zero(g),
        }
    }
}
