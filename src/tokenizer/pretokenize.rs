//! GPT-2's pre-tokenization, scanned by hand. The pattern
//!
//! ```text
//! 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//! ```
//!
//! tries its alternatives in order at each position, and every character is
//! a letter, a number, white space or "other", so some alternative always
//! matches and the words cover the text. `\p{L}`, `\p{N}` and `\s` are the
//! Unicode 16.0 General_Category L and N and the White_Space property, from
//! the generated `unicode_tables`.

use super::unicode_tables::{LETTER, NUMBER, WHITE_SPACE};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Class {
    Letter,
    Number,
    Space,
    Other,
}

/// The classes of the ASCII characters, computed at compile time from the
/// same tables as the rest.
const ASCII: [Class; 128] = {
    let mut table = [Class::Other; 128];
    let mut c = 0;
    while c < 128 {
        table[c] = class_slow(c as u32);
        c += 1;
    }
    table
};

const fn in_table(table: &[(u32, u32)], cp: u32) -> bool {
    // Binary search over sorted, disjoint ranges (const fn: no closures).
    let (mut lo, mut hi) = (0, table.len());
    while lo < hi {
        let mid = (lo + hi) / 2;
        let (start, end) = table[mid];
        if cp < start {
            hi = mid;
        } else if cp > end {
            lo = mid + 1;
        } else {
            return true;
        }
    }
    false
}

const fn class_slow(cp: u32) -> Class {
    if in_table(&LETTER, cp) {
        Class::Letter
    } else if in_table(&NUMBER, cp) {
        Class::Number
    } else if in_table(&WHITE_SPACE, cp) {
        Class::Space
    } else {
        Class::Other
    }
}

pub(super) fn class(c: char) -> Class {
    match ASCII.get(c as usize) {
        Some(&class) => class,
        None => class_slow(c as u32),
    }
}

/// The contraction suffixes after `'`, in the pattern's order.
const CONTRACTIONS: [&str; 7] = ["s", "t", "re", "ve", "m", "ll", "d"];

/// Calls `word` with each pre-token of `text`, in order; together they are
/// `text`. The end of `text` counts as the end of input for `(?!\S)`.
pub(super) fn split<'a>(text: &'a str, mut word: impl FnMut(&'a str)) {
    let mut start = 0;
    while start < text.len() {
        let end = start + word_len(&text[start..]);
        word(&text[start..end]);
        start = end;
    }
}

/// The byte length of the word at the start of `rest` (non-empty).
fn word_len(rest: &str) -> usize {
    let mut chars = rest.char_indices();
    let Some((_, first)) = chars.next() else {
        return 0;
    };
    if first == '\'' {
        let after = &rest[1..];
        if let Some(suffix) = CONTRACTIONS.iter().find(|s| after.starts_with(**s)) {
            return 1 + suffix.len();
        }
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional U+0020, then
    // a maximal run of one class. A space followed by white space (or by
    // nothing) matches none of them.
    let body = if first == ' ' {
        chars.next().map(|(_, c)| class(c))
    } else {
        Some(class(first))
    };
    if let Some(body @ (Class::Letter | Class::Number | Class::Other)) = body {
        let run_start = if first == ' ' { 1 } else { 0 };
        return run_start + run_len(&rest[run_start..], body);
    }
    // `\s+(?!\S)` then `\s+`: the white space run, less its last character
    // when a non-space follows and the run has more than one.
    let run = run_len(rest, Class::Space);
    match rest[run..].chars().next() {
        None => run,
        Some(_) => {
            let last = rest[..run].chars().next_back().map_or(0, char::len_utf8);
            if run > last { run - last } else { run }
        }
    }
}

/// The byte length of the longest prefix of `s` whose characters are all
/// of class `of`.
fn run_len(s: &str, of: Class) -> usize {
    s.char_indices()
        .find(|&(_, c)| class(c) != of)
        .map_or(s.len(), |(i, _)| i)
}
