//! Byte-pair merging of one word, by merge rank, with a bounded cache.
//!
//! A word starts as one token per byte. The adjacent pair with the lowest
//! merge rank is merged (the leftmost one on a tie), and the new pair it
//! forms with each neighbour becomes a candidate, until no adjacent pair
//! has a merge. A heap keeps this `O(n log n)` for the longest words.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use super::pretokenize;

/// Words longer than this are merged every time, not cached: long words
/// are rare, and the bound keeps the cache's memory small.
const MAX_CACHED_WORD_BYTES: usize = 64;
/// When the cache holds this many words it is emptied and starts again, so
/// its memory stays bounded however much distinct text passes through.
pub(super) const MAX_CACHED_WORDS: usize = 1 << 15;

/// A fast multiplicative hasher for the small keys here (pairs of ids,
/// short words); none of them comes from an adversary who could profit
/// from collisions beyond slowing their own encode.
#[derive(Default, Clone, Copy)]
pub(super) struct FxHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FxHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FxHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
        for &b in chunks.remainder() {
            self.add(u64::from(b));
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.add(word);
    }

    fn write_usize(&mut self, word: usize) {
        self.add(word as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

pub(super) type FxBuild = BuildHasherDefault<FxHasher>;

/// The key of the pair `(left, right)` in the merge table.
pub(super) fn pair_key(left: u32, right: u32) -> u64 {
    (u64::from(left) << 32) | u64::from(right)
}

/// One token of a word being merged, in a linked list over the word's
/// original byte positions: a merged-away symbol is marked dead.
#[derive(Clone, Copy)]
struct Symbol {
    id: u32,
    prev: u32,
    next: u32,
    alive: bool,
}

const NONE: u32 = u32::MAX;

/// A candidate merge of the symbol at `pos` with the next one.
#[derive(PartialEq, Eq)]
struct Candidate {
    rank: u32,
    pos: u32,
    merged: u32,
}

impl Ord for Candidate {
    // BinaryHeap pops the greatest: make that the lowest rank, then the
    // leftmost position.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .rank
            .cmp(&self.rank)
            .then_with(|| other.pos.cmp(&self.pos))
    }
}

impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

pub(super) struct Bpe {
    byte_token: [u32; 256],
    /// `pair_key(left, right)` to `(rank, merged id)`.
    merges: HashMap<u64, (u32, u32), FxBuild>,
    /// A word's bytes to the range of its ids in `cached_ids`.
    cache: HashMap<Box<[u8]>, (u32, u32), FxBuild>,
    cached_ids: Vec<u32>,
    symbols: Vec<Symbol>,
    heap: BinaryHeap<Candidate>,
}

impl Bpe {
    pub(super) fn new(byte_token: [u32; 256], merges: HashMap<u64, (u32, u32), FxBuild>) -> Self {
        Bpe {
            byte_token,
            merges,
            cache: HashMap::default(),
            cached_ids: Vec::new(),
            symbols: Vec::new(),
            heap: BinaryHeap::new(),
        }
    }

    /// Encodes text without special tokens: well-formed UTF-8 runs word by
    /// word, and each byte of an ill-formed sequence as its own token.
    pub(super) fn encode_ordinary(&mut self, text: &[u8], out: &mut Vec<u32>) {
        for chunk in text.utf8_chunks() {
            pretokenize::split(chunk.valid(), |word| self.encode_word(word.as_bytes(), out));
            out.extend(chunk.invalid().iter().map(|&b| self.byte_token[b as usize]));
        }
    }

    fn encode_word(&mut self, word: &[u8], out: &mut Vec<u32>) {
        if let [b] = word {
            out.push(self.byte_token[*b as usize]);
            return;
        }
        let cacheable = word.len() <= MAX_CACHED_WORD_BYTES;
        if cacheable && let Some(&(start, end)) = self.cache.get(word) {
            out.extend_from_slice(&self.cached_ids[start as usize..end as usize]);
            return;
        }
        let from = out.len();
        self.merge(word, out);
        if cacheable {
            if self.cache.len() >= MAX_CACHED_WORDS {
                self.cache.clear();
                self.cached_ids.clear();
            }
            let start = self.cached_ids.len() as u32;
            self.cached_ids.extend_from_slice(&out[from..]);
            let end = self.cached_ids.len() as u32;
            self.cache.insert(word.into(), (start, end));
        }
    }

    /// Appends the merged ids of `word` (at least two bytes) to `out`.
    fn merge(&mut self, word: &[u8], out: &mut Vec<u32>) {
        let n = word.len() as u32;
        self.symbols.clear();
        self.symbols
            .extend(word.iter().enumerate().map(|(i, &b)| Symbol {
                id: self.byte_token[b as usize],
                prev: if i == 0 { NONE } else { i as u32 - 1 },
                next: if i as u32 + 1 == n {
                    NONE
                } else {
                    i as u32 + 1
                },
                alive: true,
            }));
        self.heap.clear();
        for pos in 0..n - 1 {
            self.push_candidate(pos);
        }
        while let Some(top) = self.heap.pop() {
            let left = self.symbols[top.pos as usize];
            if !left.alive || left.next == NONE {
                continue;
            }
            let right = self.symbols[left.next as usize];
            // A candidate is stale when either symbol has merged since:
            // the pair now there no longer merges into the same token.
            match self.merges.get(&pair_key(left.id, right.id)) {
                Some(&(_, merged)) if merged == top.merged => {}
                _ => continue,
            }
            let pos = top.pos as usize;
            self.symbols[left.next as usize].alive = false;
            self.symbols[pos].id = top.merged;
            self.symbols[pos].next = right.next;
            if right.next != NONE {
                self.symbols[right.next as usize].prev = top.pos;
                self.push_candidate(top.pos);
            }
            if left.prev != NONE {
                self.push_candidate(left.prev);
            }
        }
        let mut pos = 0;
        while pos != NONE {
            let symbol = self.symbols[pos as usize];
            out.push(symbol.id);
            pos = symbol.next;
        }
    }

    /// Queues the merge of the symbol at `pos` with its successor, if any.
    fn push_candidate(&mut self, pos: u32) {
        let left = self.symbols[pos as usize];
        if left.next == NONE {
            return;
        }
        let right = self.symbols[left.next as usize];
        if let Some(&(rank, merged)) = self.merges.get(&pair_key(left.id, right.id)) {
            self.heap.push(Candidate { rank, pos, merged });
        }
    }

    #[cfg(test)]
    pub(super) fn cached_words(&self) -> usize {
        self.cache.len()
    }
}
