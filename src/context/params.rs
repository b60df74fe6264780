//! Creating parameters and finding them by index or name: the context's
//! side of the parameter registry (`crate::params`), which keeps the names
//! and weight-decay flags.

use super::{Context, Tensor};
use crate::error::{Error, Result};
use crate::shape::Shape;

impl Context {
    // ---- creating tensors -------------------------------------------------

    /// A new trainable parameter of `shape`, initialised from `init` (or
    /// zeros when None), with a persistent zeroed gradient, named
    /// `param.<index>` (its index in creation order). Parameters must be
    /// created before the first activation of an iteration and before the
    /// optimizer. InvalidArgument if another parameter already took the
    /// name `param.<index>` (see [`Context::param_named`]).
    pub fn param(&mut self, shape: &[usize], init: Option<&[f32]>) -> Result<Tensor> {
        self.new_param("param_new", None, shape, init)
    }

    /// Like [`Context::param`], with a name: UTF-8, 1 to
    /// [`MAX_PARAM_NAME_BYTES`](crate::MAX_PARAM_NAME_BYTES) bytes, no
    /// NUL, not `__metadata__` (reserved by safetensors), and unique in the
    /// context, automatic names (`param.<index>`) included. Safetensors
    /// files store each parameter under its name.
    pub fn param_named(
        &mut self,
        name: &str,
        shape: &[usize],
        init: Option<&[f32]>,
    ) -> Result<Tensor> {
        self.new_param("param_new_named", Some(name), shape, init)
    }

    fn new_param(
        &mut self,
        op: &'static str,
        name: Option<&str>,
        shape: &[usize],
        init: Option<&[f32]>,
    ) -> Result<Tensor> {
        let shape = Shape::new(op, shape)?;
        if let Some(v) = init
            && v.len() != shape.numel()
        {
            return Err(Error::InvalidArgument {
                op,
                what: format!(
                    "init has {} values but shape {shape} needs {}",
                    v.len(),
                    shape.numel()
                ),
            });
        }
        if self.live_tensors() != self.param_count() {
            return Err(Error::Sequence {
                op,
                what: "parameters must be created before any activation of the iteration (call ag_reset first)".into(),
            });
        }
        if self.has_optimizer() {
            return Err(Error::Sequence {
                op,
                what: "parameters must be created before the optimizer".into(),
            });
        }
        if self.param_count() >= u32::MAX as usize / 2 {
            return Err(Error::TooLarge {
                op,
                what: "too many parameters".into(),
            });
        }
        let index = self.param_count();
        let name = self.registry_mut().name_for_new(op, name, index)?;
        let id = self.push_param_row(op, shape, init)?;
        self.registry_mut().push(name, id);
        Ok(self.handle(index as u32))
    }

    /// The handle of parameter `i` (creation order); InvalidArgument past
    /// the end.
    pub fn param_at(&self, i: usize) -> Result<Tensor> {
        if i >= self.param_count() {
            return Err(Error::InvalidArgument {
                op: "param_at",
                what: format!(
                    "index {i} is past the last parameter (count {})",
                    self.param_count()
                ),
            });
        }
        Ok(self.handle(i as u32))
    }

    /// The name of parameter `p`.
    pub fn param_name(&self, p: Tensor) -> Result<&str> {
        let i = self.param_id("param_name", p)?;
        Ok(self.registry().name(i))
    }

    /// Turns the optimizer's weight decay on (the default) or off for
    /// parameter `p`; takes effect at the next step, whether the optimizer
    /// exists yet or not. Checkpoints do not carry the flag: it is part of
    /// the model's set-up, like its shapes.
    pub fn set_weight_decay(&mut self, p: Tensor, decay: bool) -> Result<()> {
        let i = self.param_id("param_set_weight_decay", p)?;
        self.registry_mut().set_decay(i, decay);
        Ok(())
    }

    /// Whether the optimizer's weight decay applies to parameter `p`.
    pub fn weight_decay(&self, p: Tensor) -> Result<bool> {
        let i = self.param_id("param_weight_decay", p)?;
        Ok(self.registry().decay(i))
    }

    /// The parameter named `name`, if any.
    pub fn param_by_name(&self, name: &str) -> Option<Tensor> {
        self.registry().find(name).map(|i| self.handle(i))
    }

    /// The table index of parameter `p`; InvalidArgument for an activation.
    pub(crate) fn param_id(&self, op: &'static str, p: Tensor) -> Result<usize> {
        let id = self.resolve(op, p)? as usize;
        if id >= self.param_count() {
            return Err(Error::InvalidArgument {
                op,
                what: "tensor is not a parameter".into(),
            });
        }
        Ok(id)
    }

    /// Overwrites a parameter's values (e.g. custom initialisation).
    pub fn param_write(&mut self, p: Tensor, data: &[f32]) -> Result<()> {
        const OP: &str = "param_write";
        let e = self.entry(self.param_id(OP, p)? as u32);
        if data.len() != e.shape.numel() {
            return Err(Error::InvalidArgument {
                op: OP,
                what: format!(
                    "data has {} values but parameter shape {} needs {}",
                    data.len(),
                    e.shape,
                    e.shape.numel()
                ),
            });
        }
        self.access_one(e.data).copy_from_slice(data);
        Ok(())
    }
    /// Handles of all parameters, in creation order.
    pub fn params(&self) -> impl Iterator<Item = Tensor> + '_ {
        (0..self.param_count() as u32).map(|i| self.handle(i))
    }
}
