//! Sharded safetensors checkpoints: a context's own save split into two
//! shards with an index, loaded through ag_safetensors_load_index, or an
//! index the input breaks (a shard missing, a tensor in both shards, not
//! JSON, a bad path).

use super::{FfiOps, Target, status_name};
use arenagrad::ffi::*;
use arenagrad::safetensors_io::{self, NamedTensor};
use std::ffi::{CString, c_char};
use std::ptr::null;

/// `s` as a JSON string literal.
fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The bytes of a float32 safetensors file of `tensors`.
fn shard_bytes(tensors: &[NamedTensor]) -> Vec<u8> {
    let views: Vec<(&str, &[usize], &[f32])> = tensors
        .iter()
        .map(|t| (t.name.as_str(), t.shape.as_slice(), t.data.as_slice()))
        .collect();
    safetensors_io::to_bytes(&views).expect("tensors read from a valid file")
}

impl FfiOps<'_> {
    pub(super) fn safetensors_load_index(&mut self) {
        let t = self.target();
        let k = self.input.u8() % 8;
        let _ = std::fs::create_dir_all(&self.dir);
        let full = self.dir.join("full.safetensors");
        let full_c = CString::new(full.to_string_lossy().as_bytes()).unwrap();
        let pre = self.pre(t, &[]);
        let saved = ag_safetensors_save(self.ptr(t), full_c.as_ptr());
        self.post("ag_safetensors_save", t, &pre, saved);
        // A file with running statistics holds int64 counts, which the
        // float reader refuses: such a context gets no expectation below.
        let read = (saved == AG_STATUS_OK)
            .then(|| std::fs::read(&full).expect("read the saved file"))
            .and_then(|bytes| safetensors_io::from_bytes(&bytes).ok());
        let expect = read.is_some();
        let tensors = read.unwrap_or_default();
        let (a, b) = tensors.split_at(tensors.len().div_ceil(2));
        let names = [
            "model-00001-of-00002.safetensors",
            "model-00002-of-00002.safetensors",
        ];
        // Mode 5: every tensor in the second shard too.
        let second = if k == 5 { &tensors[..] } else { b };
        for (name, part) in names.iter().zip([a, second]) {
            std::fs::write(self.dir.join(name), shard_bytes(part)).expect("write a shard");
        }
        if k == 4 {
            let _ = std::fs::remove_file(self.dir.join(names[1]));
        }
        let map: Vec<String> = a
            .iter()
            .map(|t| (t, names[0]))
            .chain(b.iter().map(|t| (t, names[1])))
            .map(|(t, f)| format!("{}:{}", json_str(&t.name), json_str(f)))
            .collect();
        let index = if k == 6 {
            "{\"weight_map\": [".to_string()
        } else {
            format!(
                "{{\"metadata\":{{\"total_size\":0}},\"weight_map\":{{{}}}}}",
                map.join(",")
            )
        };
        let index_path = self.dir.join("model.safetensors.index.json");
        std::fs::write(&index_path, index).expect("write the index");
        let path: Option<CString> = match (k, self.input.u8() % 3) {
            (7, 0) => None,
            (7, 1) => Some(CString::new("").unwrap()),
            (7, _) => Some(
                CString::new(self.dir.join("missing/i.json").to_string_lossy().as_bytes()).unwrap(),
            ),
            _ => Some(CString::new(index_path.to_string_lossy().as_bytes()).unwrap()),
        };
        let pp: *const c_char = path.as_ref().map_or(null(), |p| p.as_ptr());
        let t2 = self.target();
        let pre = self.pre(t2, &[]);
        if t2 == Target::Live(0) {
            self.verify_params("before ag_safetensors_load_index");
        }
        let st = ag_safetensors_load_index(self.ptr(t2), pp);
        self.post("ag_safetensors_load_index", t2, &pre, st);
        if expect && t2 == t && pre.live.is_some() {
            let want = match k {
                0..=3 => AG_STATUS_OK,
                4 | 7 => AG_STATUS_IO,
                // The first shard's tensors in the second too: refused, unless
                // the map names no second shard (at most one tensor).
                5 if b.is_empty() => AG_STATUS_OK,
                _ => AG_STATUS_CHECKPOINT_CORRUPT,
            };
            let want_io_or_arg = k == 7 && path.as_ref().is_none_or(|p| p.as_bytes().is_empty());
            assert!(
                st == want
                    || st == AG_STATUS_ALLOCATION_FAILED
                    || (want_io_or_arg
                        && matches!(st, AG_STATUS_NULL_ARGUMENT | AG_STATUS_INVALID_ARGUMENT))
                    || (k == 4 && b.is_empty() && st == AG_STATUS_OK),
                "ag_safetensors_load_index, mode {k}: {}",
                status_name(st)
            );
        }
        if t2 == Target::Live(0) && st == AG_STATUS_OK && t2 == t {
            self.verify_params("ag_safetensors_load_index of its own save");
        }
        self.param_event(t2, "ag_safetensors_load_index", st);
    }
}
