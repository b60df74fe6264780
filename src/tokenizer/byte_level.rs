//! GPT-2's byte-to-character alphabet: `encoder.json` and `vocab.bpe` spell
//! every token as characters, one per byte, so that no token holds a space,
//! a control character or a partial UTF-8 sequence. Printable Latin-1 bytes
//! (`!`..=`~`, `¡`..=`¬`, `®`..=`ÿ`) stand for themselves; the other 68
//! bytes take U+0100, U+0101, ... in byte order.

/// Whether byte `b` is its own character in the alphabet.
fn is_printable(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// The character that stands for byte `b`.
#[cfg(test)]
pub(super) fn to_char(b: u8) -> char {
    if is_printable(b) {
        return char::from(b);
    }
    let shifted = (0..b).filter(|&x| !is_printable(x)).count() as u32;
    char::from_u32(256 + shifted).unwrap_or('\0')
}

/// The byte a character stands for, or `None` outside the alphabet.
fn to_byte(c: char) -> Option<u8> {
    let cp = c as u32;
    if cp < 256 {
        let b = cp as u8;
        return is_printable(b).then_some(b);
    }
    // The n-th shifted character stands for the n-th non-printable byte.
    let n = cp.checked_sub(256)?;
    (0..=255u8).filter(|&b| !is_printable(b)).nth(n as usize)
}

/// A token's text in the alphabet back to its bytes, or `None` when a
/// character is outside the alphabet.
pub(super) fn to_bytes(text: &str) -> Option<Vec<u8>> {
    text.chars().map(to_byte).collect()
}
