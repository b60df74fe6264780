//! Safetensors files of named f32 tensors: the format PyTorch, Hugging Face
//! tools, candle and numpy share. Layout: a little-endian u64 header length
//! n, n bytes of JSON `{name: {"dtype", "shape", "data_offsets": [begin,
//! end]}, "__metadata__": {...}}`, then the tensors' bytes (little-endian,
//! row-major), each tensor's range relative to the end of the header and
//! the ranges covering the data exactly. The `safetensors` crate writes the
//! file and validates the header; this module adds what training needs
//! around it:
//!
//! * [`save`] checks its input (unique names, data lengths equal to the
//!   shapes' element counts) and writes atomically, like checkpoints: a
//!   crash leaves the old file or the new one, never a mix.
//! * [`load`] reads with bounds: a header length above
//!   [`MAX_HEADER_BYTES`] or past the end of the file is refused before
//!   anything is allocated for it, and the data is read only up to the size
//!   the header describes, so a corrupt length field, an endless file or a
//!   huge one cannot make it allocate gigabytes. It refuses truncated
//!   files, trailing bytes, invalid JSON, overlapping or out-of-range
//!   offsets, duplicate names and every dtype but F32, F16 and BF16, each
//!   with a message naming the tensor and the problem (status
//!   CHECKPOINT_CORRUPT). F16 and BF16 tensors, as `transformers` often
//!   saves them, become f32 exactly; F64 is refused rather than rounded.
//! * [`Context::safetensors_save`] and [`Context::safetensors_load`] write
//!   and fill a context's parameters by name.

use crate::context::Context;
use crate::error::{Error, Result};
use crate::fs::write_atomic;
use safetensors::tensor::Metadata;
use safetensors::{Dtype, View};
use std::borrow::Cow;
use std::fs::File;
use std::io::Read;
use std::path::Path;

/// Largest JSON header accepted (16 MiB). Real headers take about 100
/// bytes per tensor, so this is more than 100,000 tensors.
pub const MAX_HEADER_BYTES: u64 = 16 << 20;

/// The reserved header key for free-form string metadata (not a tensor).
const METADATA_KEY: &str = "__metadata__";

/// One tensor read from a file.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedTensor {
    pub name: String,
    /// Dimensions, outermost first; empty for a scalar (one element).
    pub shape: Vec<usize>,
    /// Row-major values, `shape`'s element count of them.
    pub data: Vec<f32>,
}

fn bad(op: &'static str, path: &str, what: impl std::fmt::Display) -> Error {
    Error::BadFile {
        op,
        what: format!("{path}: {what}"),
    }
}

/// An f32 tensor as the crate's serialiser sees it.
struct F32View<'a> {
    shape: &'a [usize],
    data: &'a [f32],
}

impl View for F32View<'_> {
    fn dtype(&self) -> Dtype {
        Dtype::F32
    }
    fn shape(&self) -> &[usize] {
        self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Owned(self.data.iter().flat_map(|v| v.to_le_bytes()).collect())
    }
    fn data_len(&self) -> usize {
        self.data.len() * 4
    }
}

/// The bytes of a safetensors file holding `tensors` (name, shape, values).
/// Refused (InvalidArgument): an empty or duplicate name, the reserved
/// name `__metadata__`, a shape whose element count overflows, or a value
/// count different from it.
pub fn to_bytes(tensors: &[(&str, &[usize], &[f32])]) -> Result<Vec<u8>> {
    to_bytes_with(tensors, &[])
}

/// [`to_bytes`], plus int64 scalars `counts` (name, value).
fn to_bytes_with(tensors: &[(&str, &[usize], &[f32])], counts: &[(&str, i64)]) -> Result<Vec<u8>> {
    const OP: &str = "safetensors_save";
    let invalid = |what: String| Error::InvalidArgument { op: OP, what };
    let mut names: Vec<&str> = Vec::with_capacity(tensors.len());
    for &(name, shape, data) in tensors {
        if name.is_empty() || name == METADATA_KEY {
            return Err(invalid(format!(
                "tensor name `{name}` is empty or reserved"
            )));
        }
        let numel = shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .filter(|&n| n.checked_mul(4).is_some())
            .ok_or_else(|| invalid(format!("tensor `{name}`: shape {shape:?} is too large")))?;
        if data.len() != numel {
            return Err(invalid(format!(
                "tensor `{name}`: {} values for shape {shape:?} ({numel} elements)",
                data.len()
            )));
        }
        names.push(name);
    }
    names.extend(counts.iter().map(|c| c.0));
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(invalid(format!("duplicate tensor name `{}`", w[0])));
    }
    let views = tensors
        .iter()
        .map(|&(name, shape, data)| (name, buffers::AnyView::F32(F32View { shape, data })))
        .chain(
            counts
                .iter()
                .map(|&(name, v)| (name, buffers::AnyView::I64(v))),
        );
    safetensors::serialize(views, None).map_err(|e| invalid(format!("cannot serialise: {e}")))
}

/// Writes `tensors` (name, shape, values) as a safetensors file at `path`,
/// atomically (temporary file, fsync, rename, fsync of the folder): on
/// failure any earlier file at `path` is untouched. Errors: InvalidArgument
/// (see [`to_bytes`]), Io.
pub fn save(path: &Path, tensors: &[(&str, &[usize], &[f32])]) -> Result<()> {
    let bytes = to_bytes(tensors)?;
    write_atomic("safetensors_save", path, &bytes, "safetensors file")
}

/// Header keys in file order (duplicates kept, which serde's maps would
/// silently merge: the last one would win).
struct HeaderKeys(Vec<String>);

impl<'de> serde::Deserialize<'de> for HeaderKeys {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = HeaderKeys;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<HeaderKeys, A::Error> {
                let mut keys = Vec::new();
                while let Some(k) = map.next_key::<String>()? {
                    map.next_value::<serde::de::IgnoredAny>()?;
                    keys.push(k);
                }
                Ok(HeaderKeys(keys))
            }
        }
        d.deserialize_map(Keys)
    }
}

/// Parses and validates the JSON header (no duplicate keys; offsets
/// contiguous from 0, each range the size its dtype and shape need, no
/// overflow).
fn parse_header(op: &'static str, path: &str, header: &[u8]) -> Result<Metadata> {
    let text = std::str::from_utf8(header)
        .map_err(|e| bad(op, path, format!("header is not UTF-8 ({e})")))?;
    let HeaderKeys(mut keys) = serde_json::from_str(text)
        .map_err(|e| bad(op, path, format!("header is not a JSON object ({e})")))?;
    keys.sort_unstable();
    if let Some(w) = keys.windows(2).find(|w| w[0] == w[1]) {
        return Err(bad(op, path, format!("duplicate tensor name `{}`", w[0])));
    }
    serde_json::from_str::<Metadata>(text).map_err(|e| {
        bad(
            op,
            path,
            format!("header: {}", diagnose(text).unwrap_or(e.to_string())),
        )
    })
}

/// Names the tensor whose header entry is wrong (the crate's message for
/// a size mismatch does not).
fn diagnose(text: &str) -> Option<String> {
    let map: serde_json::Map<String, serde_json::Value> = serde_json::from_str(text).ok()?;
    for (name, v) in map.iter().filter(|(k, _)| *k != METADATA_KEY) {
        let info = match serde_json::from_value::<safetensors::tensor::TensorInfo>(v.clone()) {
            Ok(i) => i,
            Err(e) => return Some(format!("tensor `{name}`: {e}")),
        };
        let (begin, end) = info.data_offsets;
        let need = info
            .shape
            .iter()
            .try_fold(info.dtype.bitsize(), |n, &d| n.checked_mul(d))
            .map(|bits| bits.div_ceil(8));
        if end < begin || need != Some(end - begin) {
            return Some(format!(
                "tensor `{name}`: shape {:?} of {:?} does not fit data_offsets [{begin}, {end}]",
                info.shape, info.dtype
            ));
        }
    }
    None
}

/// The tensors of a whole safetensors file held in memory, in file order
/// (writers, this one included, sort them by name). Errors: BadFile (see
/// the module docs).
pub fn from_bytes(bytes: &[u8]) -> Result<Vec<NamedTensor>> {
    parse("safetensors_load", "<bytes>", bytes, None)
}

/// Batch norm counts read from a file: (name, value) of each int64 scalar
/// named `<prefix>.num_batches_tracked`, as PyTorch writes them.
pub(crate) type Counts = Vec<(String, i64)>;

/// The tensors of `bytes`; with `counts`, int64 batch norm counts go there
/// instead of being refused.
fn parse(
    op: &'static str,
    path: &str,
    bytes: &[u8],
    mut counts: Option<&mut Counts>,
) -> Result<Vec<NamedTensor>> {
    let Some((len, rest)) = bytes.split_first_chunk::<8>() else {
        return Err(bad(
            op,
            path,
            format!(
                "truncated: {} bytes, less than the 8-byte header length",
                bytes.len()
            ),
        ));
    };
    let n = u64::from_le_bytes(*len);
    if n > MAX_HEADER_BYTES {
        return Err(bad(
            op,
            path,
            format!("header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit"),
        ));
    }
    let Some((header, data)) = rest.split_at_checked(n as usize) else {
        return Err(bad(
            op,
            path,
            format!(
                "truncated: header length {n} but {} bytes follow it",
                rest.len()
            ),
        ));
    };
    let meta = parse_header(op, path, header)?;
    if data.len() != meta.data_len() {
        let what = if data.len() < meta.data_len() {
            "truncated: "
        } else {
            ""
        };
        return Err(bad(
            op,
            path,
            format!(
                "{what}the header describes {} data bytes, the file has {}",
                meta.data_len(),
                data.len()
            ),
        ));
    }
    let mut out = Vec::new();
    out.try_reserve_exact(meta.offset_keys().len())
        .map_err(|_| Error::AllocationFailed { op, bytes: 0 })?;
    for name in meta.offset_keys() {
        let Some(info) = meta.info(&name) else {
            continue;
        };
        if let Some(counts) = counts.as_deref_mut()
            && info.dtype == Dtype::I64
            && info.shape.is_empty()
            && name.ends_with(".num_batches_tracked")
        {
            let b = &data[info.data_offsets.0..info.data_offsets.1];
            counts.push((name, i64::from_le_bytes(b.try_into().unwrap_or([0; 8]))));
            continue;
        }
        let Some(decode) = decoder(info.dtype) else {
            return Err(bad(
                op,
                path,
                format!(
                    "tensor `{name}` has dtype {:?}; only F32, F16 and BF16 are supported (convert with e.g. numpy's astype(float32))",
                    info.dtype
                ),
            ));
        };
        let (begin, end) = info.data_offsets;
        let bytes = &data[begin..end];
        let width = info.dtype.bitsize() / 8;
        let mut values = Vec::new();
        values
            .try_reserve_exact(bytes.len() / width)
            .map_err(|_| Error::AllocationFailed {
                op,
                bytes: bytes.len() / width * 4,
            })?;
        values.extend(bytes.chunks_exact(width).map(decode));
        out.push(NamedTensor {
            name,
            shape: info.shape.clone(),
            data: values,
        });
    }
    Ok(out)
}

/// How one element of `dtype` becomes an f32, for the dtypes loaded: each
/// conversion is exact (every f16 and bf16 value is an f32). F64 is
/// refused rather than rounded, so a loaded value is always the file's.
fn decoder(dtype: Dtype) -> Option<fn(&[u8]) -> f32> {
    match dtype {
        Dtype::F32 => Some(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        Dtype::F16 => Some(|b| f16_to_f32(u16::from_le_bytes([b[0], b[1]]))),
        Dtype::BF16 => Some(|b| bf16_to_f32(u16::from_le_bytes([b[0], b[1]]))),
        _ => None,
    }
}

/// The f32 of a bfloat16: its bits are the f32's upper half.
fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// The f32 of an IEEE binary16, bit for bit: the sign kept (-0.0 too),
/// subnormals normalised, infinities kept, NaN payloads kept in the
/// mantissa's top bits.
fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from(h >> 10) & 0x1f;
    let man = u32::from(h) & 0x3ff;
    let bits = match (exp, man) {
        (0, 0) => sign,
        (0, _) => {
            // Subnormal: value man * 2^-24. Shift the leading one up to
            // the implicit bit; each shift lowers the exponent by one.
            let shift = man.leading_zeros() - 21;
            let exp32 = 127 - 15 + 1 - shift;
            sign | (exp32 << 23) | ((man << shift) & 0x3ff) << 13
        }
        (0x1f, _) => sign | 0x7f80_0000 | man << 13,
        _ => sign | (exp + 127 - 15) << 23 | man << 13,
    };
    f32::from_bits(bits)
}

/// Reads a safetensors file of F32, F16 or BF16 tensors as f32, in file order (writers, this
/// one included, sort them by name), validated as
/// described in the module docs. Memory is bounded by what the file
/// really holds: nothing is allocated from a length field before it is
/// checked against the limit and the file's size. Errors: Io (cannot
/// open or read), BadFile (truncated, corrupt, trailing bytes, duplicate
/// name, dtype other than F32, F16 or BF16), AllocationFailed.
pub fn load(path: &Path) -> Result<Vec<NamedTensor>> {
    load_with(path, None)
}

/// [`load`], with the int64 batch norm counts going to `counts`.
fn load_with(path: &Path, mut counts: Option<&mut Counts>) -> Result<Vec<NamedTensor>> {
    const OP: &str = "safetensors_load";
    let shown = path.display().to_string();
    let io = |e: std::io::Error| Error::Io {
        op: OP,
        what: format!("{shown}: {e}"),
    };
    let mut file = File::open(path).map_err(io)?;
    // The size of a regular file bounds every allocation; pipes and
    // devices have none, and are read only as far as the header says.
    let size = file
        .metadata()
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len());
    let mut len = [0u8; 8];
    let got = read_up_to(&mut file, &mut len).map_err(io)?;
    if got < 8 {
        return parse(OP, &shown, &len[..got], counts.take());
    }
    let n = u64::from_le_bytes(len);
    if n > MAX_HEADER_BYTES || size.is_some_and(|s| 8 + n > s) {
        // parse() reports the limit; for a short file, say how short.
        if n > MAX_HEADER_BYTES {
            return parse(OP, &shown, &len, counts.take());
        }
        return Err(bad(
            OP,
            &shown,
            format!(
                "truncated: header length {n} but {} bytes follow it",
                size.unwrap_or(8) - 8
            ),
        ));
    }
    let mut bytes = Vec::new();
    bytes
        .try_reserve_exact(8 + n as usize)
        .map_err(|_| Error::AllocationFailed {
            op: OP,
            bytes: 8 + n as usize,
        })?;
    bytes.extend_from_slice(&len);
    (&mut file).take(n).read_to_end(&mut bytes).map_err(io)?;
    if bytes.len() as u64 != 8 + n {
        return parse(OP, &shown, &bytes, counts.take());
    }
    let data_len = parse_header(OP, &shown, &bytes[8..])?.data_len() as u64;
    let total = 8 + n + data_len;
    if let Some(s) = size {
        if s != total {
            let what = if s < total { "truncated: " } else { "" };
            return Err(bad(
                OP,
                &shown,
                format!(
                    "{what}the header describes {data_len} data bytes, the file has {}",
                    s - 8 - n
                ),
            ));
        }
        bytes
            .try_reserve_exact(data_len as usize)
            .map_err(|_| Error::AllocationFailed {
                op: OP,
                bytes: data_len as usize,
            })?;
    }
    // One byte more than described, to notice trailing data.
    (&mut file)
        .take(data_len + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    parse(OP, &shown, &bytes, counts)
}

/// Reads until `buf` is full or the end of the file; returns the count.
fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

// ---- a context's parameters as a safetensors file -------------------------

/// Dimensions written as shapes are in messages: `[4,5]`, `[]`.
fn dims_text(dims: &[usize]) -> String {
    let parts: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("[{}]", parts.join(","))
}

impl Context {
    /// The parameters as (name, shape, values), in creation order.
    fn named_params(&self) -> Vec<(&str, &[usize], &[f32])> {
        (0..self.param_count())
            .map(|i| {
                let e = self.entry_ref(i as u32);
                (
                    self.registry().name(i),
                    e.shape.dims(),
                    self.read_only(e.data),
                )
            })
            .collect()
    }

    /// The bytes of a safetensors file holding every parameter under its
    /// name, float32, shapes as they are, and the running statistics (see
    /// [`Context::safetensors_save`]).
    pub fn safetensors_bytes(&self) -> Result<Vec<u8>> {
        self.with_file_tensors(to_bytes_with)
    }

    /// Writes every parameter under its name (float32, its shape) to a
    /// safetensors file at `path`, atomically: a crash or an error leaves
    /// any earlier file at `path` as it was. Only the values are written:
    /// not gradients, optimizer state or weight-decay flags. Batch norm's
    /// running statistics go under PyTorch's names: `<prefix>.running_mean`
    /// and `.running_var` (float32 `[C]`), `.num_batches_tracked` (an int64
    /// scalar). Errors: Io.
    pub fn safetensors_save(&self, path: &Path) -> Result<()> {
        let bytes = self.safetensors_bytes()?;
        write_atomic("safetensors_save", path, &bytes, "safetensors file")
    }

    /// Fills every parameter from the tensor of the same name in the
    /// safetensors file at `path`. The file is read and checked completely
    /// first; nothing changes unless it holds exactly the model's
    /// parameters: a parameter missing from the file, a tensor the model
    /// does not have, or a shape that differs is refused with
    /// [`Error::Mismatch`] naming the tensor; a truncated or damaged file
    /// or a dtype other than F32, F16 or BF16 (those two are converted
    /// exactly) with [`Error::BadFile`]; an unreadable one
    /// with [`Error::Io`]. Only parameter values change (gradients,
    /// optimizer state and step count are kept). A context with running
    /// statistics needs them in the file too (under the names
    /// [`Context::safetensors_save`] gives them), and restores them.
    pub fn safetensors_load(&mut self, path: &Path) -> Result<()> {
        // The staging buffers count as one fallible persistent allocation
        // (so the allocation-failure hooks reach this path too).
        self.fault_point("safetensors_load", 0)?;
        let mut counts = Counts::new();
        let want = (self.batch_norm_stats_count() > 0).then_some(&mut counts);
        let tensors = load_with(path, want)?;
        self.fill_all(
            "safetensors_load",
            &path.display().to_string(),
            tensors,
            counts,
        )
    }

    /// Like [`Context::safetensors_load`], from a whole file in memory.
    pub fn safetensors_load_bytes(&mut self, bytes: &[u8]) -> Result<()> {
        const OP: &str = "safetensors_load";
        self.fault_point(OP, 0)?;
        let mut counts = Counts::new();
        let want = (self.batch_norm_stats_count() > 0).then_some(&mut counts);
        let tensors = parse(OP, "<bytes>", bytes, want)?;
        self.fill_all(OP, "<bytes>", tensors, counts)
    }

    /// Checks that `tensors` are exactly the parameters (names and shapes),
    /// then copies them in.
    fn fill_params(&mut self, op: &'static str, path: &str, tensors: &[NamedTensor]) -> Result<()> {
        let mismatch = |what: String| Error::Mismatch {
            op,
            what: format!("{path}: {what}"),
        };
        let mut slot = Vec::new();
        slot.try_reserve_exact(tensors.len())
            .map_err(|_| Error::AllocationFailed {
                op,
                bytes: tensors.len() * size_of::<usize>(),
            })?;
        for t in tensors {
            let Some(i) = self.registry().find(t.name.as_str()) else {
                return Err(mismatch(format!(
                    "tensor `{}` {} is not a parameter of the model",
                    t.name,
                    dims_text(&t.shape)
                )));
            };
            let shape = self.entry(i).shape;
            if t.shape != shape.dims() {
                return Err(mismatch(format!(
                    "tensor `{}`: shape {} in the file, {shape} in the model",
                    t.name,
                    dims_text(&t.shape)
                )));
            }
            slot.push(i as usize);
        }
        // Names in the file are unique (checked when it was read), so every
        // parameter is covered exactly when the counts agree.
        if tensors.len() != self.param_count() {
            let mut found = vec![false; self.param_count()];
            for &i in &slot {
                found[i] = true;
            }
            let i = found.iter().position(|f| !f).unwrap_or(0);
            return Err(mismatch(format!(
                "parameter `{}` {} is not in the file",
                self.registry().name(i),
                self.entry(i as u32).shape
            )));
        }
        for (t, &i) in tensors.iter().zip(&slot) {
            let data = self.entry(i as u32).data;
            self.access_one(data).copy_from_slice(&t.data);
        }
        Ok(())
    }
}

mod buffers;
mod sharded;
#[cfg(test)]
mod sharded_tests;
#[cfg(test)]
mod tests;
