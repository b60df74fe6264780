//! Batch norm's running statistics in safetensors files, under PyTorch's
//! names: `<prefix>.running_mean` and `<prefix>.running_var` (float32
//! `[C]`) and `<prefix>.num_batches_tracked` (an int64 scalar).

use super::{Counts, F32View, NamedTensor, dims_text};
use crate::buffers::{SUFFIXES, split_name};
use crate::context::Context;
use crate::error::{Error, Result};
use safetensors::{Dtype, View};
use std::borrow::Cow;

/// A float32 tensor or an int64 scalar, as the serialiser sees it.
pub(super) enum AnyView<'a> {
    F32(F32View<'a>),
    I64(i64),
}

impl View for AnyView<'_> {
    fn dtype(&self) -> Dtype {
        match self {
            AnyView::F32(_) => Dtype::F32,
            AnyView::I64(_) => Dtype::I64,
        }
    }
    fn shape(&self) -> &[usize] {
        match self {
            AnyView::F32(v) => v.shape(),
            AnyView::I64(_) => &[],
        }
    }
    fn data(&self) -> Cow<'_, [u8]> {
        match self {
            AnyView::F32(v) => v.data(),
            AnyView::I64(n) => Cow::Owned(n.to_le_bytes().to_vec()),
        }
    }
    fn data_len(&self) -> usize {
        match self {
            AnyView::F32(v) => v.data_len(),
            AnyView::I64(_) => 8,
        }
    }
}

impl Context {
    /// Calls `f` with the float32 tensors of a file (the parameters, then
    /// each set's running mean and variance) and its int64 counts.
    pub(super) fn with_file_tensors<R>(
        &self,
        f: impl FnOnce(&[(&str, &[usize], &[f32])], &[(&str, i64)]) -> R,
    ) -> R {
        let reg = self.buffers();
        let sets: Vec<_> = (0..reg.len()).map(|i| reg.get(i)).collect();
        let names: Vec<[String; 3]> = sets
            .iter()
            .map(|s| SUFFIXES.map(|suffix| format!("{}{suffix}", s.prefix)))
            .collect();
        let shapes: Vec<[usize; 1]> = sets.iter().map(|s| [s.channels]).collect();
        let mut tensors = self.named_params();
        let mut counts = Vec::with_capacity(sets.len());
        for ((set, [mean, var, count]), shape) in sets.iter().zip(&names).zip(&shapes) {
            tensors.push((mean, shape, self.read_only(set.mean())));
            tensors.push((var, shape, self.read_only(set.var())));
            let n = i64::try_from(set.num_batches).unwrap_or(i64::MAX);
            counts.push((count.as_str(), n));
        }
        f(&tensors, &counts)
    }

    /// Checks `tensors` and `counts` against the parameters and running
    /// statistics (names and shapes, every one present), then copies them
    /// in: all or nothing.
    pub(super) fn fill_all(
        &mut self,
        op: &'static str,
        path: &str,
        tensors: Vec<NamedTensor>,
        counts: Counts,
    ) -> Result<()> {
        let mismatch = |what: String| Error::Mismatch {
            op,
            what: format!("{path}: {what}"),
        };
        let n_sets = self.batch_norm_stats_count();
        // Per set: its mean and variance (index in `stats`), its count.
        let mut found: Vec<[Option<usize>; 2]> = vec![[None; 2]; n_sets];
        let mut found_count: Vec<Option<i64>> = vec![None; n_sets];
        let (mut params, mut stats) = (Vec::new(), Vec::new());
        for t in tensors {
            let set = split_name(&t.name)
                .filter(|&(_, k)| k < 2)
                .and_then(|(p, k)| Some((self.buffers().find(p)? as usize, k)));
            let Some((i, k)) = set else {
                params.push(t);
                continue;
            };
            let c = self.buffers().get(i).channels;
            if t.shape != [c] {
                return Err(mismatch(format!(
                    "tensor `{}`: shape {} in the file, [{c}] in the model",
                    t.name,
                    dims_text(&t.shape)
                )));
            }
            found[i][k] = Some(stats.len());
            stats.push(t);
        }
        for (name, v) in counts {
            let i = split_name(&name).and_then(|(p, _)| self.buffers().find(p));
            let (Some(i), Ok(_)) = (i, u64::try_from(v)) else {
                return Err(mismatch(format!(
                    "int64 tensor `{name}` ({v}) is not the count of running statistics of the model"
                )));
            };
            found_count[i as usize] = Some(v);
        }
        for i in 0..n_sets {
            let missing = SUFFIXES
                .iter()
                .zip([
                    found[i][0].is_none(),
                    found[i][1].is_none(),
                    found_count[i].is_none(),
                ])
                .find(|(_, m)| *m);
            if let Some((suffix, _)) = missing {
                let prefix = &self.buffers().get(i).prefix;
                return Err(mismatch(format!(
                    "running statistics `{prefix}{suffix}` are not in the file"
                )));
            }
        }
        self.fill_params(op, path, &params)?;
        for i in 0..n_sets {
            let (_, mean, var) = self.stats_bufs(i);
            for (k, b) in [mean, var].into_iter().enumerate() {
                let t = &stats[found[i][k].unwrap_or_default()];
                self.access_one(b).copy_from_slice(&t.data);
            }
            self.set_batches_tracked(i, found_count[i].unwrap_or_default() as u64);
        }
        Ok(())
    }
}
