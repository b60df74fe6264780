//! The parameter registry: creating parameters, their names (unique in a
//! context) and weight-decay flags, and finding them by index or name.

use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use crate::shape::Shape;
use std::collections::HashMap;

/// Most bytes in a parameter name (UTF-8, without a terminating NUL).
pub const MAX_PARAM_NAME_BYTES: usize = 255;

/// What a context knows about a parameter besides its tensor: its name and
/// whether the optimizer's weight decay applies to it. Made once, when the
/// parameter is created (never per step).
#[derive(Clone, Debug)]
struct ParamInfo {
    name: Box<str>,
    decay: bool,
}

/// Names and weight-decay flags of a context's parameters, by creation
/// index, and the index of each name.
#[derive(Debug, Default)]
pub(crate) struct ParamRegistry {
    info: Vec<ParamInfo>,
    index: HashMap<Box<str>, u32>,
}

impl ParamRegistry {
    /// The name of parameter `i`.
    pub(crate) fn name(&self, i: usize) -> &str {
        &self.info[i].name
    }

    /// Whether weight decay applies to parameter `i`.
    pub(crate) fn decay(&self, i: usize) -> bool {
        self.info[i].decay
    }

    /// The index of the parameter named `name`.
    pub(crate) fn find(&self, name: &str) -> Option<u32> {
        self.index.get(name).copied()
    }

    fn set_decay(&mut self, i: usize, decay: bool) {
        self.info[i].decay = decay;
    }

    /// Room for one more entry, so that `push` cannot fail half-way.
    fn reserve(&mut self, op: &'static str) -> Result<()> {
        let alloc_failed = |bytes| Error::AllocationFailed { op, bytes };
        self.info
            .try_reserve(1)
            .map_err(|_| alloc_failed(size_of::<ParamInfo>()))?;
        self.index
            .try_reserve(1)
            .map_err(|_| alloc_failed(size_of::<(Box<str>, u32)>()))
    }

    fn push(&mut self, name: Box<str>, index: u32) {
        debug_assert_eq!(index as usize, self.info.len());
        self.index.insert(name.clone(), index);
        self.info.push(ParamInfo { name, decay: true });
    }
}

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
    /// [`MAX_PARAM_NAME_BYTES`] bytes, no NUL, not `__metadata__` (reserved
    /// by safetensors), and unique in the context, automatic names
    /// (`param.<index>`) included. Safetensors files store each parameter
    /// under its name.
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
        let name: Box<str> = match name {
            Some(n) => {
                check_param_name(op, n)?;
                let mut s = String::new();
                s.try_reserve_exact(n.len())
                    .map_err(|_| Error::AllocationFailed { op, bytes: n.len() })?;
                s.push_str(n);
                s.into_boxed_str()
            }
            None => format!("param.{index}").into_boxed_str(),
        };
        if let Some(other) = self.registry().find(&name) {
            return Err(Error::InvalidArgument {
                op,
                what: format!(
                    "name `{name}` of new parameter {index} is already the name of parameter {other}"
                ),
            });
        }
        self.registry_mut().reserve(op)?;
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

/// Checks a parameter name (see [`Context::param_named`]).
fn check_param_name(op: &'static str, name: &str) -> Result<()> {
    let what = if name.is_empty() {
        "name is empty".to_string()
    } else if name.len() > MAX_PARAM_NAME_BYTES {
        format!(
            "name of {} bytes is longer than {MAX_PARAM_NAME_BYTES} bytes",
            name.len()
        )
    } else if name.contains('\0') {
        "name contains a NUL character".to_string()
    } else if name == "__metadata__" {
        "name `__metadata__` is reserved by the safetensors format".to_string()
    } else {
        return Ok(());
    };
    Err(Error::InvalidArgument { op, what })
}
