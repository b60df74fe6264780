//! What the entry-point files import: the guard, the handle types, the
//! pointer checks, the header's constants and statuses, and the safe API's
//! types. Only the foundation modules are named here, never an entry-point
//! file, so no entry-point file depends on another.

pub(crate) use super::guard::{guard, op};
pub(crate) use super::handle::{ag_context, ag_tensor};
pub(crate) use super::pointers::{need, path_arg, shape_arg, slice_in, slice_out, write_out};
pub(crate) use super::version::*;
pub(crate) use crate::context::{Context, Tensor};
pub(crate) use crate::error::{Error, Result};
pub(crate) use crate::status::*;
pub(crate) use std::ffi::c_char;
