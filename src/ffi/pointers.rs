//! Caller pointers: out-pointers written only after a NULL check, caller
//! arrays turned into slices only after their NULL and length checks.

use super::version::AG_MAX_DIMS;
use crate::error::{Error, Result};
use std::ffi::{CStr, c_char};
use std::path::PathBuf;

/// Writes `v` through a caller out-pointer after a NULL check.
pub(crate) fn write_out<T>(func: &'static str, arg: &'static str, out: *mut T, v: T) -> Result<()> {
    if out.is_null() {
        return Err(Error::NullArgument { func, arg });
    }
    // SAFETY: non-NULL; the caller guarantees it points to a writable T.
    unsafe { out.write(v) };
    Ok(())
}

/// Checks an out-pointer before any work is done (so nothing is computed,
/// or allocated, for a call whose result cannot be delivered).
pub(crate) fn need<T>(func: &'static str, arg: &'static str, p: *const T) -> Result<()> {
    if p.is_null() {
        Err(Error::NullArgument { func, arg })
    } else {
        Ok(())
    }
}

/// Checks a caller array: false for length 0 (no pointer needed), an error
/// for NULL or a byte length past isize::MAX, true when it can be sliced.
fn check_array<T>(func: &'static str, arg: &'static str, null: bool, len: usize) -> Result<bool> {
    if len == 0 {
        return Ok(false);
    }
    if null {
        return Err(Error::NullArgument { func, arg });
    }
    // No buffer can be this long, so the length is wrong whatever the
    // tensor: a bad argument, like any other length that does not fit.
    if len
        .checked_mul(size_of::<T>())
        .is_none_or(|b| b > isize::MAX as usize)
    {
        return Err(Error::InvalidArgument {
            op: func,
            what: format!("{arg} length {len} is larger than any buffer"),
        });
    }
    Ok(true)
}

/// A caller array as a slice; NULL is allowed only with length 0.
pub(crate) fn slice_in<'a, T>(
    func: &'static str,
    arg: &'static str,
    p: *const T,
    len: usize,
) -> Result<&'a [T]> {
    if !check_array::<T>(func, arg, p.is_null(), len)? {
        return Ok(&[]);
    }
    // SAFETY: non-NULL, and the caller guarantees `len` readable elements
    // for the duration of the call.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// A caller output array as a slice.
pub(crate) fn slice_out<'a, T>(
    func: &'static str,
    arg: &'static str,
    p: *mut T,
    len: usize,
) -> Result<&'a mut [T]> {
    if !check_array::<T>(func, arg, p.is_null(), len)? {
        return Ok(&mut []);
    }
    // SAFETY: non-NULL, and the caller guarantees `len` writable elements
    // that no one else accesses during the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// A shape argument: 1 to AG_MAX_DIMS dimensions read from `shape`.
pub(crate) fn shape_arg<'a>(
    func: &'static str,
    shape: *const usize,
    ndim: usize,
) -> Result<&'a [usize]> {
    if ndim == 0 || ndim > AG_MAX_DIMS {
        return Err(Error::BadShape {
            op: func,
            what: format!("ndim {ndim} is outside 1..={AG_MAX_DIMS}"),
        });
    }
    slice_in(func, "shape", shape, ndim)
}

/// A path argument: a non-empty UTF-8 C string.
pub(crate) fn path_arg(func: &'static str, path: *const c_char) -> Result<PathBuf> {
    if path.is_null() {
        return Err(Error::NullArgument { func, arg: "path" });
    }
    // SAFETY: non-NULL, and the caller guarantees a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(path) };
    let s = s.to_str().map_err(|_| Error::InvalidArgument {
        op: func,
        what: "path is not valid UTF-8".into(),
    })?;
    if s.is_empty() {
        return Err(Error::InvalidArgument {
            op: func,
            what: "path is empty".into(),
        });
    }
    Ok(PathBuf::from(s))
}
