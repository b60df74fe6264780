//! The parameter registry: the names (unique in a context) and
//! weight-decay flags of a context's parameters, and finding them by name.
//! The context drives it (`context/params.rs`): this module knows nothing
//! of tensors.

use crate::error::{Error, Result};
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

    /// Turns weight decay on or off for parameter `i`.
    pub(crate) fn set_decay(&mut self, i: usize, decay: bool) {
        self.info[i].decay = decay;
    }

    /// The name parameter `index` will have: `name` checked (see
    /// [`check_param_name`]) and unique, or `param.<index>`; with room made
    /// for its entry, so that [`ParamRegistry::push`] cannot fail.
    pub(crate) fn name_for_new(
        &mut self,
        op: &'static str,
        name: Option<&str>,
        index: usize,
    ) -> Result<Box<str>> {
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
        if let Some(other) = self.find(&name) {
            return Err(Error::InvalidArgument {
                op,
                what: format!(
                    "name `{name}` of new parameter {index} is already the name of parameter {other}"
                ),
            });
        }
        self.reserve(op)?;
        Ok(name)
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

    /// Records parameter `index` under `name` (from
    /// [`ParamRegistry::name_for_new`]), weight decay on.
    pub(crate) fn push(&mut self, name: Box<str>, index: u32) {
        debug_assert_eq!(index as usize, self.info.len());
        self.index.insert(name.clone(), index);
        self.info.push(ParamInfo { name, decay: true });
    }
}

/// Checks a parameter name: UTF-8, 1 to [`MAX_PARAM_NAME_BYTES`] bytes,
/// no NUL, not `__metadata__` (reserved by safetensors).
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
