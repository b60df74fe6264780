//! GPT-2's byte-level BPE tokenizer: text bytes to token ids and back.
//!
//! Encoding follows GPT-2's encoder, and on valid UTF-8 gives the same ids as
//! Hugging Face `tokenizers` (a `BPE` model from the same two files with the
//! `ByteLevel` pre-tokenizer, no prefix space):
//!
//! 1. With `allow_special`, the literal text `<|endoftext|>` becomes its id
//!    (50256 in GPT-2) and splits the input; without it, that text is
//!    ordinary text.
//! 2. Each piece is cut into words by GPT-2's pattern
//!    `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`,
//!    scanned by hand in `pretokenize` with Unicode 16.0 classes.
//! 3. Each word's bytes are merged by rank (`bpe`).
//!
//! Input that is not valid UTF-8 never fails. The rule: the bytes are read
//! left to right as UTF-8; each maximal run of well-formed UTF-8 is encoded
//! exactly as that run alone would be, and every byte that is not part of a
//! well-formed sequence becomes one token on its own, the token of that
//! single byte (every byte value has one). Hence `decode(encode(b)) == b`
//! for every byte string `b`.
//!
//! ```no_run
//! use arenagrad::tokenizer::Tokenizer;
//! # fn main() -> arenagrad::Result<()> {
//! let mut tok = Tokenizer::from_files("data/gpt2/encoder.json", "data/gpt2/vocab.bpe")?;
//! let mut ids = Vec::new();
//! tok.encode(b"Hello world", false, &mut ids);
//! assert_eq!(ids, [15496, 995]);
//! let mut text = Vec::new();
//! tok.decode(&ids, &mut text)?;
//! assert_eq!(text, b"Hello world");
//! # Ok(())
//! # }
//! ```

mod bpe;
mod byte_level;
mod pretokenize;
#[cfg(test)]
mod tests;
#[rustfmt::skip]
mod unicode_tables;

use std::collections::HashMap;
use std::path::Path;

use crate::error::{Error, Result};
use bpe::{Bpe, FxBuild};

/// The one special token: the document separator GPT-2 was trained with.
pub const END_OF_TEXT: &str = "<|endoftext|>";

/// A token id as a caller stores it: `u32` in Rust, `i32` (C's `int32_t`,
/// what embedding ops take) at the C API. Every id of a loaded vocabulary
/// fits both.
pub trait TokenId: Copy {
    /// An id below the vocabulary size (at most `i32::MAX`).
    fn from_id(id: u32) -> Self;
    /// The id's value, negative ones included, for range checks.
    fn value(self) -> i64;
}

impl TokenId for u32 {
    fn from_id(id: u32) -> Self {
        id
    }
    fn value(self) -> i64 {
        i64::from(self)
    }
}

impl TokenId for i32 {
    fn from_id(id: u32) -> Self {
        // Ids are below the vocabulary size, which from_bytes keeps at
        // most i32::MAX.
        i32::try_from(id).unwrap_or(i32::MAX)
    }
    fn value(self) -> i64 {
        i64::from(self)
    }
}

/// The answer of the `*_to_buffer` calls: either everything was written, or
/// the buffer was too small and nothing was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fit {
    /// This many elements were written at the start of the buffer.
    Written(usize),
    /// The result needs this many elements; the buffer was left untouched.
    Needed(usize),
}

/// A loaded GPT-2 vocabulary with its merge ranks and a bounded cache of
/// encoded words. Encoding takes `&mut self` only for that cache and a
/// scratch buffer; one thread uses a tokenizer at a time.
pub struct Tokenizer {
    /// Every token's bytes, back to back; token `i` is
    /// `bytes[offsets[i]..offsets[i + 1]]`.
    bytes: Vec<u8>,
    offsets: Vec<u32>,
    end_of_text: u32,
    bpe: Bpe,
    scratch: Vec<u32>,
}

impl Tokenizer {
    /// Loads GPT-2's `encoder.json` (token text to id) and `vocab.bpe` (one
    /// merge `left right` per line, in rank order). Errors: `Io` when a file
    /// cannot be read, `BadFile` when one is malformed (see
    /// [`Tokenizer::from_bytes`]).
    pub fn from_files(encoder_json: impl AsRef<Path>, vocab_bpe: impl AsRef<Path>) -> Result<Self> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|e| Error::Io {
                op: "tokenizer_new",
                what: format!("{}: {e}", path.display()),
            })
        };
        Self::from_bytes(&read(encoder_json.as_ref())?, &read(vocab_bpe.as_ref())?)
    }

    /// Builds a tokenizer from the contents of `encoder.json` and
    /// `vocab.bpe`. `BadFile` when: the JSON is not an object of token to
    /// id; a token has a character outside the byte-level alphabet; the ids
    /// are not exactly `0..n` each once; a byte has no single-byte token;
    /// [`END_OF_TEXT`] is missing; a merge line is not two tokens separated
    /// by one space; or a merge's tokens or result are not in the vocabulary.
    pub fn from_bytes(encoder_json: &[u8], vocab_bpe: &[u8]) -> Result<Self> {
        let bad = |what: String| Error::BadFile {
            op: "tokenizer_new",
            what,
        };
        let entries: HashMap<String, u64> =
            serde_json::from_slice(encoder_json).map_err(|e| bad(format!("encoder.json: {e}")))?;
        let n = entries.len();
        // Every id must fit the C API's int32_t as well as a u32.
        if n > i32::MAX as usize {
            return Err(bad(format!("encoder.json: {n} tokens")));
        }
        let mut by_id: Vec<Option<Vec<u8>>> = vec![None; n];
        let mut ids: HashMap<Vec<u8>, u32, FxBuild> = HashMap::default();
        for (text, id) in entries {
            let raw = byte_level::to_bytes(&text)
                .ok_or_else(|| bad(format!("encoder.json: token {text:?} is not byte-level")))?;
            let slot = usize::try_from(id)
                .ok()
                .and_then(|i| by_id.get_mut(i))
                .ok_or_else(|| bad(format!("encoder.json: id {id} of {n} tokens")))?;
            if slot.is_some() {
                return Err(bad(format!("encoder.json: id {id} appears twice")));
            }
            *slot = Some(raw.clone());
            ids.insert(raw, id as u32);
        }
        let mut bytes = Vec::new();
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0u32);
        for token in by_id {
            // Every slot is filled: n distinct ids, each below n.
            bytes.extend_from_slice(&token.unwrap_or_default());
            let end = u32::try_from(bytes.len())
                .map_err(|_| bad("encoder.json: tokens over 4 GiB".into()))?;
            offsets.push(end);
        }
        let mut byte_token = [0u32; 256];
        for (b, slot) in byte_token.iter_mut().enumerate() {
            *slot = *ids
                .get(&[b as u8][..])
                .ok_or_else(|| bad(format!("encoder.json: no token for byte {b:#04x}")))?;
        }
        let end_of_text = *ids
            .get(END_OF_TEXT.as_bytes())
            .ok_or_else(|| bad(format!("encoder.json: no {END_OF_TEXT}")))?;
        let merges = parse_merges(vocab_bpe, &ids).map_err(bad)?;
        Ok(Tokenizer {
            bytes,
            offsets,
            end_of_text,
            bpe: Bpe::new(byte_token, merges),
            scratch: Vec::new(),
        })
    }

    /// The number of tokens (50257 for GPT-2): every id is below it.
    pub fn vocab_size(&self) -> usize {
        self.offsets.len() - 1
    }

    /// The id of [`END_OF_TEXT`] (50256 for GPT-2).
    pub fn end_of_text(&self) -> u32 {
        self.end_of_text
    }

    /// The id of a special token named by its text, or `None`: GPT-2 has
    /// one, [`END_OF_TEXT`].
    pub fn special_token(&self, text: &[u8]) -> Option<u32> {
        (text == END_OF_TEXT.as_bytes()).then_some(self.end_of_text)
    }

    /// The bytes a token stands for, or `None` for an id out of range.
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        let i = id as usize;
        let (&start, &end) = (self.offsets.get(i)?, self.offsets.get(i + 1)?);
        Some(&self.bytes[start as usize..end as usize])
    }

    /// Appends the ids of `text` to `out`. Never fails: any byte string
    /// encodes (see the module docs for the rule on invalid UTF-8). With
    /// `allow_special`, each `<|endoftext|>` in `text` becomes
    /// [`Tokenizer::end_of_text`]; without it, that text is ordinary text.
    pub fn encode(&mut self, text: &[u8], allow_special: bool, out: &mut Vec<u32>) {
        if !allow_special {
            return self.bpe.encode_ordinary(text, out);
        }
        let special = END_OF_TEXT.as_bytes();
        let mut rest = text;
        while let Some(at) = find(rest, special) {
            self.bpe.encode_ordinary(&rest[..at], out);
            out.push(self.end_of_text);
            rest = &rest[at + special.len()..];
        }
        self.bpe.encode_ordinary(rest, out);
    }

    /// Encodes into a caller's buffer: `Fit::Written(n)` with the ids in
    /// `out[..n]`, or `Fit::Needed(n)` with `out` untouched when it holds
    /// fewer than `n`. A call that fits makes no allocation once the
    /// tokenizer has seen texts of that size.
    pub fn encode_to_buffer<T: TokenId>(
        &mut self,
        text: &[u8],
        allow_special: bool,
        out: &mut [T],
    ) -> Fit {
        let mut ids = std::mem::take(&mut self.scratch);
        ids.clear();
        self.encode(text, allow_special, &mut ids);
        let fit = match out.get_mut(..ids.len()) {
            Some(dst) => {
                for (d, &id) in dst.iter_mut().zip(&ids) {
                    *d = T::from_id(id);
                }
                Fit::Written(ids.len())
            }
            None => Fit::Needed(ids.len()),
        };
        self.scratch = ids;
        fit
    }

    /// Appends the bytes of `ids` to `out`. `IndexOutOfRange` (naming the
    /// first bad position) when an id is not below
    /// [`Tokenizer::vocab_size`]; then `out` is unchanged.
    pub fn decode(&self, ids: &[u32], out: &mut Vec<u8>) -> Result<()> {
        let len = self.decoded_len(ids)?;
        out.reserve(len);
        for &id in ids {
            out.extend_from_slice(self.token(i64::from(id)));
        }
        Ok(())
    }

    /// Decodes into a caller's buffer: `Fit::Written(n)` with the bytes in
    /// `out[..n]`, or `Fit::Needed(n)` with `out` untouched. Errors as
    /// [`Tokenizer::decode`].
    pub fn decode_to_buffer<T: TokenId>(&self, ids: &[T], out: &mut [u8]) -> Result<Fit> {
        let len = self.decoded_len(ids)?;
        let Some(mut dst) = out.get_mut(..len) else {
            return Ok(Fit::Needed(len));
        };
        for &id in ids {
            let token = self.token(id.value());
            let (head, tail) = dst.split_at_mut(token.len());
            head.copy_from_slice(token);
            dst = tail;
        }
        Ok(Fit::Written(len))
    }

    /// Checks every id and sums the byte lengths.
    fn decoded_len<T: TokenId>(&self, ids: &[T]) -> Result<usize> {
        let mut len = 0usize;
        for (position, &id) in ids.iter().enumerate() {
            match self.token_of_value(id.value()) {
                Some(token) => len += token.len(),
                None => {
                    return Err(Error::IndexOutOfRange {
                        op: "tokenizer_decode",
                        position,
                        value: id.value(),
                        bound: self.vocab_size(),
                    });
                }
            }
        }
        Ok(len)
    }

    /// The bytes of an id of any sign, or `None` out of range.
    fn token_of_value(&self, id: i64) -> Option<&[u8]> {
        self.token_bytes(u32::try_from(id).ok()?)
    }

    /// The bytes of an id already checked to be in range.
    fn token(&self, id: i64) -> &[u8] {
        self.token_of_value(id).unwrap_or_default()
    }

    /// How many words the encode cache holds now (for tests of its bound).
    #[cfg(test)]
    fn cached_words(&self) -> usize {
        self.bpe.cached_words()
    }
}

/// The first position of `needle` (non-empty) in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let first = needle[0];
    let mut from = 0;
    while let Some(i) = haystack[from..].iter().position(|&b| b == first) {
        let at = from + i;
        if haystack[at..].starts_with(needle) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// Parses `vocab.bpe` into `(left id, right id) -> (rank, merged id)`.
/// Lines starting with `#version` and empty lines are skipped; rank counts
/// the merge lines from 0. A pair listed twice keeps its later rank.
fn parse_merges(
    vocab_bpe: &[u8],
    ids: &HashMap<Vec<u8>, u32, FxBuild>,
) -> std::result::Result<HashMap<u64, (u32, u32), FxBuild>, String> {
    let text = std::str::from_utf8(vocab_bpe).map_err(|e| format!("vocab.bpe: {e}"))?;
    let mut merges = HashMap::default();
    let mut rank = 0u32;
    for (number, line) in text.lines().enumerate() {
        if line.is_empty() || line.starts_with("#version") {
            continue;
        }
        let line_no = number + 1;
        let mut parts = line.split(' ');
        let (Some(left), Some(right), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!(
                "vocab.bpe line {line_no}: not two tokens: {line:?}"
            ));
        };
        let id = |text: &str| {
            let raw = byte_level::to_bytes(text)?;
            ids.get(&raw).copied()
        };
        let missing = || format!("vocab.bpe line {line_no}: {line:?} is not in the vocabulary");
        let (l, r) = (
            id(left).ok_or_else(missing)?,
            id(right).ok_or_else(missing)?,
        );
        let merged = id(&format!("{left}{right}")).ok_or_else(missing)?;
        merges.insert(bpe::pair_key(l, r), (rank, merged));
        rank += 1;
    }
    Ok(merges)
}
