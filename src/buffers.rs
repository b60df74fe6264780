//! The buffer registry: persistent values that are not parameters. Today
//! these are batch normalisation's running statistics, one set per
//! normalised layer: `<prefix>.running_mean` and `<prefix>.running_var`
//! (`[C]` floats each) and `<prefix>.num_batches_tracked` (a count), the
//! names PyTorch gives them. They get no gradient, no optimizer state and
//! no place in the parameter count, and they survive `reset` like
//! parameters. The context drives the registry (`context/buffers.rs`): this
//! module keeps names, sizes and storage, and knows nothing of tensors.

use crate::arena::Buf;
use crate::error::{Error, Result};
use std::collections::HashMap;

/// One set of running statistics.
#[derive(Debug)]
pub(crate) struct StatsSet {
    pub prefix: Box<str>,
    /// Running mean then running variance, `[2C]` in one persistent block.
    pub values: Buf,
    pub channels: usize,
    /// Training forwards that updated the statistics.
    pub num_batches: u64,
}

impl StatsSet {
    /// The running mean, `[C]`.
    pub(crate) fn mean(&self) -> Buf {
        crate::arena::Storage::sub(self.values, 0, self.channels)
    }

    /// The running variance, `[C]`.
    pub(crate) fn var(&self) -> Buf {
        crate::arena::Storage::sub(self.values, self.channels, self.channels)
    }
}

/// The sets of running statistics of a context, by creation index, and
/// the index of each prefix.
#[derive(Debug, Default)]
pub(crate) struct BufferRegistry {
    sets: Vec<StatsSet>,
    index: HashMap<Box<str>, u32>,
}

/// The suffixes PyTorch gives a batch norm layer's buffers.
pub(crate) const SUFFIXES: [&str; 3] = [".running_mean", ".running_var", ".num_batches_tracked"];

impl BufferRegistry {
    pub(crate) fn len(&self) -> usize {
        self.sets.len()
    }

    pub(crate) fn get(&self, i: usize) -> &StatsSet {
        &self.sets[i]
    }

    pub(crate) fn get_mut(&mut self, i: usize) -> &mut StatsSet {
        &mut self.sets[i]
    }

    /// The index of the set whose prefix is `prefix`.
    pub(crate) fn find(&self, prefix: &str) -> Option<u32> {
        self.index.get(prefix).copied()
    }

    /// Checks `prefix` (1 to 200 bytes, no NUL, unique) and makes room for
    /// one more set, so that [`BufferRegistry::push`] cannot fail.
    pub(crate) fn check_new(&mut self, op: &'static str, prefix: &str) -> Result<()> {
        let what = if prefix.is_empty() {
            "prefix is empty".to_string()
        } else if prefix.len() > MAX_PREFIX_BYTES {
            format!(
                "prefix of {} bytes is longer than {MAX_PREFIX_BYTES} bytes",
                prefix.len()
            )
        } else if prefix.contains('\0') {
            "prefix contains a NUL character".to_string()
        } else if let Some(other) = self.find(prefix) {
            format!("prefix `{prefix}` is already the prefix of statistics set {other}")
        } else {
            let alloc_failed = |bytes| Error::AllocationFailed { op, bytes };
            self.sets
                .try_reserve(1)
                .map_err(|_| alloc_failed(size_of::<StatsSet>()))?;
            return self
                .index
                .try_reserve(1)
                .map_err(|_| alloc_failed(size_of::<(Box<str>, u32)>()));
        };
        Err(Error::InvalidArgument { op, what })
    }

    /// Records a set checked by [`BufferRegistry::check_new`]; its index.
    pub(crate) fn push(&mut self, set: StatsSet) -> u32 {
        let i = self.sets.len() as u32;
        self.index.insert(set.prefix.clone(), i);
        self.sets.push(set);
        i
    }
}

/// Most bytes in a statistics prefix: the longest suffix still leaves the
/// full name within a parameter name's 255 bytes.
pub const MAX_PREFIX_BYTES: usize = 200;

/// Splits a buffer name into its set's prefix and which buffer it is
/// (0 mean, 1 variance, 2 count), if it ends in one of [`SUFFIXES`].
pub(crate) fn split_name(name: &str) -> Option<(&str, usize)> {
    SUFFIXES
        .iter()
        .enumerate()
        .find_map(|(k, s)| name.strip_suffix(s).map(|p| (p, k)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn names_split_into_prefix_and_kind() {
        assert_eq!(super::split_name("bn1.running_var"), Some(("bn1", 1)));
        assert_eq!(
            super::split_name("a.b.num_batches_tracked"),
            Some(("a.b", 2))
        );
        assert_eq!(super::split_name("bn1.weight"), None);
    }
}
