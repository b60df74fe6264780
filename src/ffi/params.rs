//! Parameter names and listing, per-parameter weight decay, and
//! safetensors export and import of the parameters.

use super::prelude::*;
use std::ffi::CStr;

/// Most bytes in a parameter name, without the terminating NUL: a buffer
/// of AG_MAX_PARAM_NAME + 1 chars holds any name.
pub const AG_MAX_PARAM_NAME: usize = 255;
const _: () = assert!(AG_MAX_PARAM_NAME == crate::params::MAX_PARAM_NAME_BYTES);

/// A NUL-terminated UTF-8 string argument.
fn str_arg<'a>(func: &'static str, arg: &'static str, p: *const c_char) -> Result<&'a str> {
    if p.is_null() {
        return Err(Error::NullArgument { func, arg });
    }
    // SAFETY: non-NULL, and the caller guarantees a NUL-terminated string
    // that stays valid during the call.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str().map_err(|_| Error::InvalidArgument {
        op: func,
        what: format!("{arg} is not valid UTF-8"),
    })
}

/// Like ag_param_new, and names the parameter `name` (copied): UTF-8, 1 to
/// AG_MAX_PARAM_NAME bytes, not "__metadata__" (reserved by safetensors),
/// unique in the context. ag_param_new names its parameters "param.N",
/// N being the index in creation order (as ag_param_at counts), and those
/// names count too: a clash either way is refused. ag_safetensors_save and
/// ag_safetensors_load store and find each parameter under its name.
/// Errors: NULL_ARGUMENT (out, shape or name), INVALID_ARGUMENT (name
/// empty, too long, not UTF-8, reserved, or already used: the message names
/// both parameters), SHAPE_MISMATCH (ndim outside 1..AG_MAX_DIMS, a zero
/// dimension), TOO_LARGE (more than 2^31 - 1 elements), SEQUENCE (an
/// optimizer exists, or activations were made this iteration),
/// ALLOCATION_FAILED.
#[unsafe(no_mangle)]
pub extern "C" fn ag_param_new_named(
    ctx: *mut ag_context,
    name: *const c_char,
    shape: *const usize,
    ndim: usize,
    init: *const f32,
    out: *mut ag_tensor,
) -> ag_status {
    const F: &str = "ag_param_new_named";
    guard(F, ctx, |c| {
        need(F, "out", out)?;
        let name = str_arg(F, "name", name)?;
        let dims = shape_arg(F, shape, ndim)?;
        let n = crate::Shape::new(F, dims)?.numel();
        let init = if init.is_null() {
            None
        } else {
            Some(slice_in(F, "init", init, n)?)
        };
        let t = c.param_named(name, dims, init)?;
        write_out(F, "out", out, t.into())
    })
}

/// Writes the number of parameters of the context to `*n`.
/// Errors: NULL_ARGUMENT (n).
#[unsafe(no_mangle)]
pub extern "C" fn ag_param_count(ctx: *mut ag_context, n: *mut usize) -> ag_status {
    const F: &str = "ag_param_count";
    guard(F, ctx, |c| write_out(F, "n", n, c.param_count()))
}

/// Writes the handle of parameter `i` (0-based, creation order) to `*out`.
/// With ag_param_count, ag_param_name and ag_tensor_shape a program can
/// list a model's parameters without keeping its own table.
/// Errors: NULL_ARGUMENT (out), INVALID_ARGUMENT (i >= the parameter
/// count).
#[unsafe(no_mangle)]
pub extern "C" fn ag_param_at(ctx: *mut ag_context, i: usize, out: *mut ag_tensor) -> ag_status {
    const F: &str = "ag_param_at";
    guard(F, ctx, |c| {
        need(F, "out", out)?;
        let t = c.param_at(i)?;
        write_out(F, "out", out, t.into())
    })
}

/// Writes the length in bytes of parameter `p`'s name (without the NUL)
/// to `*len` and, when `buf` is not NULL, the name and a terminating NUL
/// to `buf[0..cap]`. `buf` may be NULL with `cap` 0 to ask only the
/// length; a buffer of AG_MAX_PARAM_NAME + 1 chars always fits. A name is
/// never truncated: when cap < length + 1 the call fails with
/// INVALID_ARGUMENT and writes nothing (neither buf nor *len).
/// Errors: NULL_ARGUMENT (len, or buf when cap > 0), INVALID_ARGUMENT
/// (p is not a parameter, cap too small), STALE_HANDLE, WRONG_CONTEXT,
/// INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn ag_param_name(
    ctx: *mut ag_context,
    p: ag_tensor,
    buf: *mut c_char,
    cap: usize,
    len: *mut usize,
) -> ag_status {
    const F: &str = "ag_param_name";
    guard(F, ctx, |c| {
        need(F, "len", len)?;
        if buf.is_null() && cap > 0 {
            return Err(Error::NullArgument {
                func: F,
                arg: "buf",
            });
        }
        let name = c.param_name(p.into())?;
        if !buf.is_null() {
            if cap < name.len() + 1 {
                return Err(Error::InvalidArgument {
                    op: F,
                    what: format!(
                        "buffer of {cap} bytes cannot hold the name `{name}` ({} bytes and a NUL)",
                        name.len()
                    ),
                });
            }
            let dst = slice_out(F, "buf", buf.cast::<u8>(), name.len() + 1)?;
            dst[..name.len()].copy_from_slice(name.as_bytes());
            dst[name.len()] = 0;
        }
        write_out(F, "len", len, name.len())
    })
}

/// Writes every parameter to a safetensors file at `path` (the format
/// PyTorch, Hugging Face tools, candle and numpy read): each under its name
/// (see ag_param_new_named), float32, with its shape, little-endian,
/// row-major; tensors are sorted by name in the file, as the format's
/// writers do. Only values are written, not gradients, optimizer state or
/// weight-decay flags. Atomic like ag_checkpoint_save: a crash or an error
/// leaves any earlier file at `path` intact and no temporary file behind.
/// Errors: NULL_ARGUMENT (path), INVALID_ARGUMENT (path empty or not
/// UTF-8), IO.
#[unsafe(no_mangle)]
pub extern "C" fn ag_safetensors_save(ctx: *mut ag_context, path: *const c_char) -> ag_status {
    const F: &str = "ag_safetensors_save";
    guard(F, ctx, |c| {
        let p = path_arg(F, path)?;
        c.safetensors_save(&p)
    })
}

/// Fills every parameter with the tensor of the same name from the
/// safetensors file at `path`. The file is read and checked completely
/// before any parameter changes: on any error nothing changes. It must hold
/// exactly the model's parameters, each with the parameter's shape (a
/// scalar of shape [] does not fill a parameter of shape [1]), as float32
/// (F32), or float16 (F16) or bfloat16 (BF16), which are converted to
/// float32 exactly; F64 is refused rather than rounded.
/// Only parameter values change; gradients, optimizer state and its step
/// count are kept. The message of a refusal names the file and the
/// tensor.
/// Errors: NULL_ARGUMENT (path), INVALID_ARGUMENT (path empty or not
/// UTF-8), IO (cannot open or read the file), CHECKPOINT_CORRUPT (not a
/// valid safetensors file: truncated, damaged, trailing bytes, or a tensor
/// whose dtype is not F32, F16 or BF16), CHECKPOINT_MISMATCH (a parameter missing from
/// the file, a tensor that is not a parameter, a shape that differs),
/// ALLOCATION_FAILED (the file's tensors do not fit in memory).
#[unsafe(no_mangle)]
pub extern "C" fn ag_safetensors_load(ctx: *mut ag_context, path: *const c_char) -> ag_status {
    const F: &str = "ag_safetensors_load";
    guard(F, ctx, |c| {
        let p = path_arg(F, path)?;
        c.safetensors_load(&p)
    })
}

/// Fills every parameter from a sharded checkpoint, as `transformers`
/// saves large models: `path` is its
/// `model.safetensors.index.json`, whose `"weight_map"` object maps each
/// tensor name to the shard file holding it (a file name in the index's
/// folder, e.g. model-00001-of-00002.safetensors). Every shard is read and
/// checked before any parameter changes: on any error nothing changes. At
/// the end every parameter must have been found, exactly once, in the shard
/// the map names for it, and every tensor of the shards must be a parameter
/// listed in the map; dtypes and shapes as for ag_safetensors_load (F32,
/// F16, BF16). Only parameter values change. The message of a refusal
/// names the file and the tensor.
/// Errors: NULL_ARGUMENT (path), INVALID_ARGUMENT (path empty or not
/// UTF-8), IO (cannot read the index or a shard: a shard the map names is
/// missing), CHECKPOINT_CORRUPT (the index is not JSON with a
/// "weight_map" object of strings, or names a tensor twice or a shard
/// outside its folder; a tensor lies in a shard the map does not name for
/// it, e.g. in two shards; a tensor of the map is in no shard; a shard is
/// not a valid safetensors file), CHECKPOINT_MISMATCH (a parameter missing
/// from the shards, a tensor that is not a parameter, a shape that
/// differs), ALLOCATION_FAILED (the tensors do not fit in memory).
#[unsafe(no_mangle)]
pub extern "C" fn ag_safetensors_load_index(
    ctx: *mut ag_context,
    path: *const c_char,
) -> ag_status {
    const F: &str = "ag_safetensors_load_index";
    guard(F, ctx, |c| {
        let p = path_arg(F, path)?;
        c.safetensors_load_index(&p)
    })
}

/// Turns the optimizer's weight decay on (the default for every parameter)
/// or off for parameter `p`. With it off, ag_optimizer_sgd's L2 term and
/// ag_optimizer_adamw's decoupled decay skip `p`; its gradient update is
/// unchanged. The usual choice is decay for matrices and embeddings only,
/// not biases or LayerNorm gains. Works before or after the optimizer is
/// created, taking effect at the next step. The flag is part of the model's
/// set-up, like its shapes: checkpoints and safetensors files do not carry
/// it, so a program sets it again when it rebuilds the model.
/// Errors: INVALID_ARGUMENT (p is not a parameter), STALE_HANDLE,
/// WRONG_CONTEXT, INVALID_HANDLE.
#[unsafe(no_mangle)]
pub extern "C" fn ag_param_set_weight_decay(
    ctx: *mut ag_context,
    p: ag_tensor,
    decay: bool,
) -> ag_status {
    guard("ag_param_set_weight_decay", ctx, |c| {
        c.set_weight_decay(p.into(), decay)
    })
}
