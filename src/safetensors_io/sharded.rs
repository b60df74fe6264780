//! Checkpoints split over several safetensors files, as `transformers`
//! saves large models: `model.safetensors.index.json` holds
//! `{"weight_map": {tensor name: shard file name}, ...}` and the shards
//! (`model-00001-of-00002.safetensors`, ...) lie beside it. Loading checks
//! that the index and the shards agree before anything changes: each
//! tensor lies in the shard the map names and in no other, and each shard
//! the map names exists and holds what the map says.

use super::{Counts, MAX_HEADER_BYTES, NamedTensor, bad, load_with};
use crate::context::Context;
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::io::Read;
use std::path::Path;

const OP: &str = "safetensors_load_index";

/// The pairs of a JSON object in file order, duplicates kept (a map would
/// silently keep the last one).
struct Pairs(Vec<(String, String)>);

impl<'de> serde::Deserialize<'de> for Pairs {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Pairs;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of tensor name: shard file name")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Pairs, A::Error> {
                let mut pairs = Vec::new();
                while let Some(kv) = map.next_entry::<String, String>()? {
                    pairs.push(kv);
                }
                Ok(Pairs(pairs))
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(serde::Deserialize)]
struct Index {
    weight_map: Pairs,
}

/// The weight map of the index file at `path`: (tensor, shard) pairs with
/// unique tensor names and shard names that are plain file names.
fn read_index(path: &Path, shown: &str) -> Result<Vec<(String, String)>> {
    let io = |e: std::io::Error| Error::Io {
        op: OP,
        what: format!("{shown}: {e}"),
    };
    let mut text = Vec::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(MAX_HEADER_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(io)?;
    if text.len() as u64 > MAX_HEADER_BYTES {
        return Err(bad(
            OP,
            shown,
            format!("index larger than the {MAX_HEADER_BYTES}-byte limit"),
        ));
    }
    let Index {
        weight_map: Pairs(map),
    } = serde_json::from_slice(&text).map_err(|e| {
        bad(
            OP,
            shown,
            format!(
                "not an index of a sharded checkpoint (a JSON object with \"weight_map\"): {e}"
            ),
        )
    })?;
    let mut names: Vec<&str> = map.iter().map(|(k, _)| k.as_str()).collect();
    names.sort_unstable();
    if let Some(w) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(bad(
            OP,
            shown,
            format!("tensor `{}` is in the weight_map twice", w[0]),
        ));
    }
    if let Some((k, f)) = map
        .iter()
        .find(|(_, f)| f.is_empty() || f.contains(['/', '\\']) || f == "." || f == "..")
    {
        return Err(bad(
            OP,
            shown,
            format!("tensor `{k}`: shard `{f}` is not a file name in the index's folder"),
        ));
    }
    Ok(map)
}

impl Context {
    /// Fills every parameter from a sharded checkpoint: `index` is its
    /// `model.safetensors.index.json`, whose `weight_map` names the shard
    /// (a file in the same folder) holding each tensor. Every shard the map
    /// names is read and checked first, and nothing changes unless they all
    /// agree with the map and together hold exactly the model's parameters
    /// (and running statistics), as [`Context::safetensors_load`] requires
    /// of one file; F16 and BF16 shards are converted exactly. Refused with
    /// [`Error::BadFile`] (naming the file and tensor): an index that is
    /// not JSON with a `weight_map` object of strings, a tensor listed
    /// twice, a tensor in a shard the map does not name for it (which
    /// covers a tensor in two shards), a tensor the map lists that its
    /// shard lacks, or a damaged shard; with [`Error::Io`]: an index or
    /// shard that cannot be read (a missing shard names its file); with
    /// [`Error::Mismatch`]: the tensors do not match the model's.
    pub fn safetensors_load_index(&mut self, index: &Path) -> Result<()> {
        self.fault_point(OP, 0)?;
        let shown = index.display().to_string();
        let map = read_index(index, &shown)?;
        let folder = index.parent().unwrap_or(Path::new("."));
        let mut shards: Vec<&str> = map.iter().map(|(_, f)| f.as_str()).collect();
        shards.sort_unstable();
        shards.dedup();
        let wanted: HashMap<&str, &str> =
            map.iter().map(|(k, f)| (k.as_str(), f.as_str())).collect();
        let mut found: HashMap<String, &str> = HashMap::new();
        let mut tensors: Vec<NamedTensor> = Vec::new();
        let mut counts = Counts::new();
        let with_counts = self.batch_norm_stats_count() > 0;
        for &shard in &shards {
            let mut shard_counts = Counts::new();
            let got = load_with(
                &folder.join(shard),
                with_counts.then_some(&mut shard_counts),
            )?;
            let names = got
                .iter()
                .map(|t| t.name.as_str())
                .chain(shard_counts.iter().map(|c| c.0.as_str()));
            for name in names {
                if let Some(other) = found.insert(name.to_owned(), shard) {
                    return Err(bad(
                        OP,
                        &shown,
                        format!("tensor `{name}` is in two shards, {other} and {shard}"),
                    ));
                }
                match wanted.get(name) {
                    Some(&f) if f == shard => {}
                    Some(&f) => {
                        return Err(bad(
                            OP,
                            &shown,
                            format!("tensor `{name}` is in {shard}, but the weight_map names {f}"),
                        ));
                    }
                    None => {
                        return Err(bad(
                            OP,
                            &shown,
                            format!("tensor `{name}` of {shard} is not in the weight_map"),
                        ));
                    }
                }
            }
            tensors.extend(got);
            counts.extend(shard_counts);
        }
        if let Some((k, f)) = map.iter().find(|(k, _)| !found.contains_key(k.as_str())) {
            return Err(bad(
                OP,
                &shown,
                format!("tensor `{k}` is in no shard (the weight_map names {f}, which lacks it)"),
            ));
        }
        self.fill_all(OP, &shown, tensors, counts)
    }
}
