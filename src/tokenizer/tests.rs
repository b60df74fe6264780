//! Tests that need no downloaded vocabulary: a small vocabulary is built
//! here. tests/tokenizer.rs compares with the reference on GPT-2's own.

use super::byte_level::{to_bytes, to_char};
use super::pretokenize::{Class, class, split};
use super::*;

fn words(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    split(text, |w| out.push(w));
    out
}

#[test]
fn pretokenize_follows_the_pattern() {
    // Each expectation is what the pattern's alternatives, tried in order,
    // give (and what the reference gives).
    let cases: &[(&str, &[&str])] = &[
        ("Hello world", &["Hello", " world"]),
        ("  a", &[" ", " a"]),
        ("a  ", &["a", "  "]),
        ("a \n b", &["a", " \n", " b"]),
        ("I'm don't 'S", &["I", "'m", " don", "'t", " '", "S"]),
        ("''s", &["''", "s"]),
        ("'ll've're'd", &["'ll", "'ve", "'re", "'d"]),
        ("x\u{a0}y", &["x", "\u{a0}", "y"]),
        ("1,000.5", &["1", ",", "000", ".", "5"]),
        ("a\t\tb", &["a", "\t", "\t", "b"]),
        ("  \u{3000}z", &["  ", "\u{3000}", "z"]),
        ("!? ?! 12ab", &["!?", " ?!", " 12", "ab"]),
        (" ", &[" "]),
        ("", &[]),
        (
            "\u{0660}\u{0661}x\u{0301}",
            &["\u{0660}\u{0661}", "x", "\u{0301}"],
        ),
    ];
    for (text, want) in cases {
        assert_eq!(words(text), *want, "{text:?}");
    }
}

#[test]
fn classes_come_from_the_tables() {
    assert_eq!(class('a'), Class::Letter);
    assert_eq!(class('\u{00AA}'), Class::Letter); // ª, Lo
    assert_eq!(class('\u{1C89}'), Class::Letter); // new in Unicode 16.0
    assert_eq!(class('7'), Class::Number);
    assert_eq!(class('\u{00BD}'), Class::Number); // ½, No
    assert_eq!(class('\u{0085}'), Class::Space);
    assert_eq!(class('\u{200B}'), Class::Other); // zero width space is not White_Space
    assert_eq!(class('\u{0301}'), Class::Other); // combining mark
    assert_eq!(class('\u{1F600}'), Class::Other);
}

#[test]
fn byte_alphabet_is_a_bijection() {
    let mut seen = std::collections::HashSet::new();
    for b in 0..=255u8 {
        let c = to_char(b);
        assert!(seen.insert(c), "byte {b} maps to a taken char {c:?}");
        assert_eq!(to_bytes(&c.to_string()), Some(vec![b]));
    }
    assert_eq!(to_char(b' '), '\u{0120}'); // "Ġ"
    assert_eq!(to_char(b'A'), 'A');
    assert_eq!(to_bytes("\u{0144}"), None); // one past the last shifted char
    assert_eq!(to_bytes(" "), None);
}

/// A vocabulary of the 256 bytes, `<|endoftext|>` and the given merges, in
/// rank order, as the two file contents.
fn small_vocab(merges: &[(&str, &str)]) -> (Vec<u8>, Vec<u8>) {
    let spell = |s: &str| s.bytes().map(to_char).collect::<String>();
    let mut tokens: Vec<String> = (0..=255u8).map(|b| to_char(b).to_string()).collect();
    let mut bpe = String::from("#version: 0.2\n");
    for (l, r) in merges {
        tokens.push(spell(&format!("{l}{r}")));
        bpe.push_str(&format!("{} {}\n", spell(l), spell(r)));
    }
    tokens.push(END_OF_TEXT.to_string());
    let map: serde_json::Map<String, serde_json::Value> = tokens
        .into_iter()
        .enumerate()
        .map(|(i, t)| (t, serde_json::Value::from(i)))
        .collect();
    (serde_json::to_vec(&map).unwrap(), bpe.into_bytes())
}

fn small_tokenizer() -> Tokenizer {
    let (json, bpe) = small_vocab(&[
        ("a", "a"),
        (" ", "a"),
        ("aa", "a"),
        (" a", "b"),
        ("aa", "aa"),
    ]);
    Tokenizer::from_bytes(&json, &bpe).unwrap()
}

fn encode(tok: &mut Tokenizer, text: &[u8], special: bool) -> Vec<u32> {
    let mut ids = Vec::new();
    tok.encode(text, special, &mut ids);
    ids
}

#[test]
fn merges_go_by_rank_then_leftmost() {
    let mut tok = small_tokenizer();
    let (aa, space_a, aaa, space_ab, aaaa) = (256, 257, 258, 259, 260);
    assert_eq!(tok.vocab_size(), 262);
    assert_eq!(tok.end_of_text(), 261);
    let a = u32::from(b'a');
    // "aa" (rank 0) merges first, leftmost first; then "aa a" (rank 2)
    // before "aa aa" (rank 4).
    assert_eq!(encode(&mut tok, b"aaa", false), [aaa]);
    assert_eq!(encode(&mut tok, b"aaaa", false), [aaaa]);
    assert_eq!(encode(&mut tok, b"aaaaa", false), [aa, aaa]);
    // " a" (rank 1) loses to "aa" (rank 0) on its right.
    assert_eq!(
        encode(&mut tok, b" aab", false),
        [u32::from(b' '), aa, u32::from(b'b')]
    );
    assert_eq!(encode(&mut tok, b" ab", false), [space_ab]);
    assert_eq!(encode(&mut tok, b" a", false), [space_a]);
    assert_eq!(encode(&mut tok, b"aab aaa", false), [aa, 98, 32, aaa]);
    assert_eq!(encode(&mut tok, b"a", false), [a]);
    assert_eq!(encode(&mut tok, b"aaaaaaa", false), [aaaa, aaa]);
}

#[test]
fn special_token_only_when_allowed() {
    let mut tok = small_tokenizer();
    let text = b"a<|endoftext|><|endoftext|>b";
    let eot = tok.end_of_text();
    assert_eq!(encode(&mut tok, text, true), [97, eot, eot, 98]);
    let plain = encode(&mut tok, text, false);
    assert!(!plain.contains(&eot));
    assert_eq!(tok.special_token(b"<|endoftext|>"), Some(eot));
    assert_eq!(tok.special_token(b"<|end|>"), None);
    // The special token splits words: the space before it ends its piece.
    assert_eq!(encode(&mut tok, b"a <|endoftext|>", true), [97, 32, eot]);
}

/// SplitMix64, for reproducible random inputs without a crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// Random bytes biased towards the interesting ones: spaces, letters,
/// apostrophes, UTF-8 lead and continuation bytes, and the special token.
fn random_bytes(rng: &mut Rng, len: usize) -> Vec<u8> {
    const PIECES: &[&[u8]] = &[
        b" ",
        b"a",
        b"'s",
        b"\n",
        b"\xC3",
        b"\xA9",
        b"\xE2\x80",
        b"\xF0\x9F\x98\x80",
        b"<|endoftext|>",
        b"7",
        b"\xED\xA0\x80",
        b"\xFF",
        b"\t",
    ];
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        let r = rng.next();
        if r.is_multiple_of(3) {
            out.push((r >> 8) as u8);
        } else {
            out.extend_from_slice(PIECES[(r >> 8) as usize % PIECES.len()]);
        }
    }
    out
}

#[test]
fn decode_inverts_encode_on_any_bytes() {
    let mut tok = small_tokenizer();
    let mut rng = Rng(0x70_6b_65_6e);
    for round in 0..3000 {
        let len = (rng.next() % 64) as usize;
        let text = random_bytes(&mut rng, len);
        for special in [false, true] {
            let ids = encode(&mut tok, &text, special);
            let mut back = Vec::new();
            tok.decode(&ids, &mut back).unwrap();
            assert_eq!(back, text, "round {round}, special {special}");
        }
    }
}

#[test]
fn invalid_bytes_are_their_own_tokens() {
    let mut tok = small_tokenizer();
    // "aa" then a lone continuation byte, then "aa": the valid runs are
    // encoded alone, the invalid byte is one token.
    assert_eq!(encode(&mut tok, b"aa\x80aa", false), [256, 0x80, 256]);
    // A truncated 3-byte sequence: both bytes invalid, each its own token.
    assert_eq!(encode(&mut tok, b"\xE2\x82 a", false), [0xE2, 0x82, 257]);
    // The run before an invalid byte ends there, as at the end of input:
    // its trailing spaces stay together.
    assert_eq!(encode(&mut tok, b"a  \xFFa", false), [97, 32, 32, 0xFF, 97]);
}

#[test]
fn cache_stays_bounded() {
    let mut tok = small_tokenizer();
    let mut ids = Vec::new();
    for i in 0..(super::bpe::MAX_CACHED_WORDS * 2 + 5) {
        ids.clear();
        tok.encode(format!("w{i:x}q").as_bytes(), false, &mut ids);
        assert!(tok.cached_words() <= super::bpe::MAX_CACHED_WORDS);
    }
    assert!(tok.cached_words() > 0);
}

#[test]
fn buffers_report_the_needed_length() {
    let mut tok = small_tokenizer();
    let mut ids = [7u32; 1];
    assert_eq!(
        tok.encode_to_buffer(b"aa ab", false, &mut ids),
        Fit::Needed(2)
    );
    assert_eq!(ids, [7]);
    let mut ids = [0u32; 3];
    assert_eq!(
        tok.encode_to_buffer(b"aa ab", false, &mut ids),
        Fit::Written(2)
    );
    assert_eq!(ids, [256, 259, 0]);
    let mut bytes = [0u8; 3];
    assert_eq!(
        tok.decode_to_buffer(&[256, 257], &mut bytes).unwrap(),
        Fit::Needed(4)
    );
    assert_eq!(bytes, [0; 3]);
    let mut bytes = [0u8; 5];
    assert_eq!(
        tok.decode_to_buffer(&[256, 257], &mut bytes).unwrap(),
        Fit::Written(4)
    );
    assert_eq!(&bytes, b"aa a\0");
}

#[test]
fn decode_rejects_unknown_ids() {
    let tok = small_tokenizer();
    let mut out = b"kept".to_vec();
    let err = tok.decode(&[97, 262, 0], &mut out).unwrap_err();
    assert!(matches!(
        err,
        Error::IndexOutOfRange {
            position: 1,
            value: 262,
            bound: 262,
            ..
        }
    ));
    assert_eq!(out, b"kept");
    assert!(tok.decode_to_buffer(&[u32::MAX], &mut [0u8; 8]).is_err());
    assert_eq!(tok.token_bytes(262), None);
    assert_eq!(tok.token_bytes(256), Some(&b"aa"[..]));
}

#[test]
fn malformed_files_are_refused() {
    let (json, bpe) = small_vocab(&[("a", "a")]);
    let bad_file = |json: &[u8], bpe: &[u8]| {
        matches!(Tokenizer::from_bytes(json, bpe), Err(Error::BadFile { .. }))
    };
    assert!(Tokenizer::from_bytes(&json, &bpe).is_ok());
    assert!(bad_file(b"[1, 2]", &bpe));
    assert!(bad_file(b"{\"a\": 0}", &bpe)); // bytes without tokens
    assert!(bad_file(&json, b"a\n")); // one token on a line
    assert!(bad_file(&json, b"a b c\n"));
    assert!(bad_file(&json, b"b c\n")); // "bc" is not a token
    let text = String::from_utf8(json.clone()).unwrap();
    assert!(bad_file(
        text.replace("<|endoftext|>", "<|eot|>").as_bytes(),
        &bpe
    ));
    assert!(bad_file(text.replace(":257", ":300").as_bytes(), &bpe)); // an id gap
    assert!(bad_file(text.replace("\"a\":", "\"a \":").as_bytes(), &bpe)); // not byte-level
    assert!(matches!(
        Tokenizer::from_files("/nonexistent/encoder.json", "/nonexistent/vocab.bpe"),
        Err(Error::Io { .. })
    ));
}

/// The Unicode 16.0 tables agree with Debian's `unicode-data` (the UCD
/// text files at 15.0) on every code point 15.0 assigns: an independent
/// source for the classes, read when the package is installed.
#[test]
fn classes_agree_with_the_system_ucd() {
    let dir = std::path::Path::new("/usr/share/unicode");
    let (Ok(data), Ok(props)) = (
        std::fs::read_to_string(dir.join("UnicodeData.txt")),
        std::fs::read_to_string(dir.join("PropList.txt")),
    ) else {
        eprintln!("skipped: /usr/share/unicode (Debian's unicode-data) is absent");
        return;
    };
    let mut white = std::collections::HashSet::new();
    for line in props.lines() {
        let line = line.split('#').next().unwrap_or("");
        let Some((range, prop)) = line.split_once(';') else {
            continue;
        };
        if prop.trim() != "White_Space" {
            continue;
        }
        let (lo, hi) = range
            .trim()
            .split_once("..")
            .unwrap_or((range.trim(), range.trim()));
        let (lo, hi) = (
            u32::from_str_radix(lo, 16).unwrap(),
            u32::from_str_radix(hi, 16).unwrap(),
        );
        white.extend(lo..=hi);
    }
    let want = |cp: u32, gc: &str| {
        if gc.starts_with('L') {
            Class::Letter
        } else if gc.starts_with('N') {
            Class::Number
        } else if white.contains(&cp) {
            Class::Space
        } else {
            Class::Other
        }
    };
    let (mut checked, mut wrong) = (0usize, Vec::new());
    let mut first_of_range = None;
    for line in data.lines() {
        let f: Vec<&str> = line.split(';').collect();
        let cp = u32::from_str_radix(f[0], 16).unwrap();
        // Ranges are two lines, "<..., First>" and "<..., Last>".
        let range = if f[1].ends_with(", First>") {
            first_of_range = Some(cp);
            continue;
        } else if f[1].ends_with(", Last>") {
            first_of_range.take().unwrap()..=cp
        } else {
            cp..=cp
        };
        for cp in range {
            let Some(c) = char::from_u32(cp) else {
                continue; // surrogates
            };
            checked += 1;
            if class(c) != want(cp, f[2]) {
                wrong.push(format!("U+{cp:04X} ({})", f[2]));
            }
        }
    }
    assert!(checked > 100_000, "only {checked} code points read");
    assert!(
        wrong.is_empty(),
        "classes differ from the system UCD: {wrong:?}"
    );
}
