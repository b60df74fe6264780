//! The GPT-2 tokenizer against Hugging Face `tokenizers`, through the Rust
//! API and the C API, and the C API's statuses.
//!
//! The reference ids are fixtures written by scripts/tokenizer_reference.py
//! (tests/data/tokenizer/), so no Python is needed here. The tests that need
//! GPT-2's vocabulary (data/gpt2, from scripts/get_gpt2_vocab.sh or `make
//! tokenizer-data`) skip with a message when it is absent, and fail when the
//! environment variable CI is set. The C API's statuses are checked on a
//! small vocabulary written by the test itself.

use arenagrad::ffi::*;
use arenagrad::tokenizer::Tokenizer;
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::ptr::{null, null_mut};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Whether a missing input is a failure (CI provides it) or a skip.
fn required() -> bool {
    std::env::var_os("CI").is_some()
}

/// GPT-2's vocabulary files, or None (after saying why) when absent.
fn gpt2_files() -> Option<(PathBuf, PathBuf)> {
    let dir = root().join("data/gpt2");
    let (vocab, merges) = (dir.join("encoder.json"), dir.join("vocab.bpe"));
    if vocab.is_file() && merges.is_file() {
        return Some((vocab, merges));
    }
    let why = "data/gpt2 is absent: run `make tokenizer-data` (scripts/get_gpt2_vocab.sh)";
    assert!(!required(), "{why} (CI is set, so this fails)");
    eprintln!("skipped: {why}");
    None
}

fn gpt2() -> Option<Tokenizer> {
    let (vocab, merges) = gpt2_files()?;
    Some(Tokenizer::from_files(vocab, merges).expect("data/gpt2 loads"))
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(root().join("tests/data/tokenizer").join(name))
        .unwrap_or_else(|e| panic!("tests/data/tokenizer/{name}: {e}"))
}

/// A text file of reference ids: decimal, separated by spaces and newlines.
fn reference_ids(name: &str) -> Vec<u32> {
    let text = String::from_utf8(fixture(name)).expect("ids are ASCII");
    let mut ids = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for word in line.split(' ') {
            let id = word.parse::<u16>().unwrap_or_else(|_| {
                panic!(
                    "tests/data/tokenizer/{name}:{}: {word:?} is not an id",
                    n + 1
                )
            });
            ids.push(u32::from(id));
        }
    }
    ids
}

fn reference() -> serde_json::Value {
    serde_json::from_slice(&fixture("reference.json")).unwrap()
}

/// FNV-1a (64-bit) of the ids as little-endian u32, as the reference
/// script computes it.
fn fnv1a64(ids: &[u32]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in ids.iter().flat_map(|i| i.to_le_bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// Panics at the first difference, showing the text around it.
fn assert_same_ids(text: &[u8], ours: &[u32], want: &[u32], tok: &Tokenizer) {
    if let Some(i) = (0..ours.len().min(want.len())).find(|&i| ours[i] != want[i]) {
        let around = |ids: &[u32]| {
            let mut out = Vec::new();
            let lo = i.saturating_sub(3);
            tok.decode(&ids[lo..(i + 4).min(ids.len())], &mut out)
                .unwrap();
            String::from_utf8_lossy(&out).into_owned()
        };
        panic!(
            "id {i} differs: ours {:?}, reference {:?}; ours decode {:?}, reference {:?}",
            &ours[i.saturating_sub(3)..(i + 4).min(ours.len())],
            &want[i.saturating_sub(3)..(i + 4).min(want.len())],
            around(ours),
            around(want)
        );
    }
    assert_eq!(
        ours.len(),
        want.len(),
        "id counts differ ({} bytes)",
        text.len()
    );
}

#[test]
fn stress_text_matches_the_reference() {
    let Some(mut tok) = gpt2() else { return };
    let text = fixture("stress.txt");
    let want = reference_ids("stress.ids.txt");
    let r = reference();
    assert_eq!(r["stress"]["bytes"], text.len());
    assert_eq!(r["stress"]["ids"], want.len());
    assert_eq!(r["stress"]["fnv1a64"], fnv1a64(&want));
    let mut ids = Vec::new();
    tok.encode(&text, false, &mut ids);
    assert_same_ids(&text, &ids, &want, &tok);
    // Nothing in the stress text is special, so allowing specials changes
    // nothing.
    let mut special = Vec::new();
    tok.encode(&text, true, &mut special);
    assert_eq!(special, ids);
    let mut back = Vec::new();
    tok.decode(&ids, &mut back).unwrap();
    assert!(back == text, "decode(encode(stress.txt)) differs");
}

#[test]
fn shakespeare_count_and_checksum_match_the_reference() {
    let Some(mut tok) = gpt2() else { return };
    let path = root().join("../shared/data/shakespeare_tiny.txt");
    let Ok(text) = std::fs::read(&path) else {
        // The data folder beside the repository is optional (the model
        // tests fall back to generated text without it).
        eprintln!("skipped: {} is absent", path.display());
        return;
    };
    let r = &reference()["shakespeare_tiny"];
    if r["bytes"] != text.len() {
        eprintln!(
            "skipped: {} is not the file the reference saw",
            path.display()
        );
        return;
    }
    let mut ids = Vec::new();
    tok.encode(&text, false, &mut ids);
    assert_eq!(r["ids"], ids.len(), "id count");
    assert_eq!(r["fnv1a64"], fnv1a64(&ids), "checksum of the ids");
}

/// Known GPT-2 ids, as a check that does not depend on the fixtures.
#[test]
fn known_ids() {
    let Some(mut tok) = gpt2() else { return };
    let mut ids = Vec::new();
    tok.encode(b"Hello world", false, &mut ids);
    assert_eq!(ids, [15496, 995]);
    ids.clear();
    tok.encode(b"a<|endoftext|>b", true, &mut ids);
    assert_eq!(ids, [64, 50256, 65]);
    assert_eq!(tok.vocab_size(), 50257);
    assert_eq!(tok.end_of_text(), 50256);
}

/// A small deterministic generator (xorshift64*), so the cases are fixed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[test]
fn random_bytes_round_trip() {
    let Some(mut tok) = gpt2() else { return };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    // Pieces that make odd byte strings likely: UTF-8 lead and
    // continuation bytes, spaces, letters, the special text.
    let pieces: &[&[u8]] = &[
        b" ",
        b"a",
        b"'s",
        b"\xc3",
        b"\xa9",
        b"\xe2\x80",
        b"\xf0\x9f\x98\x80",
        b"\xff",
        b"\n",
        b"<|endoftext|>",
        b"1",
        b"\r\n",
        b"\t",
    ];
    let mut ids = Vec::new();
    let mut back = Vec::new();
    for case in 0..2000 {
        let len = (rng.next() % 64) as usize;
        let text: Vec<u8> = (0..len)
            .flat_map(|_| {
                let r = rng.next();
                if r.is_multiple_of(3) {
                    vec![(r >> 8) as u8]
                } else {
                    pieces[(r >> 8) as usize % pieces.len()].to_vec()
                }
            })
            .collect();
        for allow_special in [false, true] {
            ids.clear();
            back.clear();
            tok.encode(&text, allow_special, &mut ids);
            tok.decode(&ids, &mut back).unwrap();
            assert_eq!(back, text, "case {case}, allow_special {allow_special}");
        }
    }
}

// ---- the C API ------------------------------------------------------------------------

/// GPT-2's byte-level alphabet: the printable Latin-1 bytes stand for
/// themselves, the others for U+0100 upwards in byte order.
fn byte_char(b: u8) -> char {
    let printable = |b: u8| matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
    if printable(b) {
        return char::from(b);
    }
    let shift = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(0x100 + shift).unwrap()
}

/// A folder with a small vocabulary (256 byte tokens, the merges
/// "h e" -> 256 and "Ġ he" -> 257, <|endoftext|> = 258) and broken files.
struct Files {
    dir: PathBuf,
}

impl Files {
    fn new(name: &str) -> Files {
        let dir = std::env::temp_dir().join(format!("ag_tokenizer_{}_{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut entries: Vec<String> = (0..=255u8)
            .map(|b| {
                let t = byte_char(b)
                    .to_string()
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"");
                format!("\"{t}\": {b}")
            })
            .collect();
        entries.push("\"he\": 256".into());
        entries.push("\"Ġhe\": 257".into());
        entries.push("\"<|endoftext|>\": 258".into());
        std::fs::write(dir.join("vocab.json"), format!("{{{}}}", entries.join(","))).unwrap();
        std::fs::write(dir.join("merges.txt"), "#version: 0.2\nh e\nĠ he\n").unwrap();
        std::fs::write(dir.join("corrupt.json"), "{\"a\": 0, \"b\": ").unwrap();
        std::fs::write(dir.join("bad_merges.txt"), "h e\nq zz\n").unwrap();
        Files { dir }
    }
    fn path(&self, name: &str) -> CString {
        CString::new(self.dir.join(name).to_str().unwrap()).unwrap()
    }
    fn open(&self) -> *mut ag_tokenizer {
        let mut t = null_mut();
        let st = ag_tokenizer_open(
            self.path("vocab.json").as_ptr(),
            self.path("merges.txt").as_ptr(),
            &mut t,
        );
        assert_eq!(st, AG_STATUS_OK, "{}", last_error());
        assert!(!t.is_null());
        t
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn last_error() -> String {
    // SAFETY: documented as a NUL-terminated string, never NULL, valid until
    // the next tokenizer call on this thread.
    unsafe { CStr::from_ptr(ag_tokenizer_last_error()) }
        .to_str()
        .unwrap()
        .to_owned()
}

/// The status names each ag_tokenizer_* function's "Errors:" clause lists
/// in the header.
fn documented_errors(func: &str) -> Vec<String> {
    let header = std::fs::read_to_string(root().join("include/arenagrad.h")).unwrap();
    let mut comment = String::new();
    for line in header.lines() {
        if let Some(c) = line.strip_prefix("//") {
            comment.push_str(c);
            comment.push(' ');
            continue;
        }
        if line.starts_with(&format!("ag_status {func}(")) {
            let clause = &comment[comment.find("Errors").expect("an Errors: clause")..];
            return clause
                .split(|c: char| !(c.is_ascii_uppercase() || c == '_'))
                .filter(|w| w.len() > 1)
                .map(str::to_string)
                .collect();
        }
        comment.clear();
    }
    panic!("{func} is not in the header");
}

fn status_name(st: ag_status) -> String {
    // SAFETY: static NUL-terminated string.
    let s = unsafe { CStr::from_ptr(ag_status_str(st)) };
    let names = [
        (AG_STATUS_NULL_ARGUMENT, "NULL_ARGUMENT"),
        (AG_STATUS_INVALID_ARGUMENT, "INVALID_ARGUMENT"),
        (AG_STATUS_INVALID_HANDLE, "INVALID_HANDLE"),
        (AG_STATUS_IO, "IO"),
        (AG_STATUS_CHECKPOINT_CORRUPT, "CHECKPOINT_CORRUPT"),
        (AG_STATUS_INDEX_OUT_OF_RANGE, "INDEX_OUT_OF_RANGE"),
        (AG_STATUS_BUFFER_TOO_SMALL, "BUFFER_TOO_SMALL"),
        (AG_STATUS_BUSY, "BUSY"),
        (AG_STATUS_POISONED, "POISONED"),
    ];
    names.iter().find(|(v, _)| *v == st).map_or_else(
        || format!("{st} ({})", s.to_string_lossy()),
        |(_, n)| n.to_string(),
    )
}

/// Asserts `st` is `want`, that the header documents it for `func`, and
/// that the message names the function.
fn expect(func: &str, st: ag_status, want: ag_status) {
    let name = status_name(want);
    assert_eq!(status_name(st), name, "{func}: {}", last_error());
    assert!(
        documented_errors(func).contains(&name),
        "{func} returns {name} but its Errors: clause does not list it"
    );
    let e = last_error();
    assert!(
        e.starts_with(func) || e.starts_with("tokenizer_"),
        "{func}: message {e:?}"
    );
}

#[test]
fn open_reports_bad_files_and_arguments() {
    let f = Files::new("open");
    let func = "ag_tokenizer_open";
    let sentinel: *mut ag_tokenizer = std::ptr::without_provenance_mut(0x40);
    let mut t = sentinel;
    let (v, m) = (f.path("vocab.json"), f.path("merges.txt"));
    expect(
        func,
        ag_tokenizer_open(v.as_ptr(), m.as_ptr(), null_mut()),
        AG_STATUS_NULL_ARGUMENT,
    );
    expect(
        func,
        ag_tokenizer_open(null(), m.as_ptr(), &mut t),
        AG_STATUS_NULL_ARGUMENT,
    );
    expect(
        func,
        ag_tokenizer_open(v.as_ptr(), null(), &mut t),
        AG_STATUS_NULL_ARGUMENT,
    );
    expect(
        func,
        ag_tokenizer_open(c"".as_ptr(), m.as_ptr(), &mut t),
        AG_STATUS_INVALID_ARGUMENT,
    );
    // files that do not open: the status, and what the message names
    let (missing, corrupt) = (f.path("missing.json"), f.path("corrupt.json"));
    let bad = f.path("bad_merges.txt");
    for (vocab, merges, want, needle) in [
        (&missing, &m, AG_STATUS_IO, "missing.json"),
        (&corrupt, &m, AG_STATUS_CHECKPOINT_CORRUPT, "encoder.json"),
        (&v, &bad, AG_STATUS_CHECKPOINT_CORRUPT, "line 2"),
    ] {
        let st = ag_tokenizer_open(vocab.as_ptr(), merges.as_ptr(), &mut t);
        expect(func, st, want);
        assert!(last_error().contains(needle), "{}", last_error());
    }
    assert_eq!(t, sentinel, "out written on failure");
}

#[test]
fn encode_and_decode_through_buffers() {
    let f = Files::new("buffers");
    let mut t = f.open();
    let (mut size, mut eot) = (0usize, 0i32);
    assert_eq!(ag_tokenizer_vocab_size(t, &mut size), AG_STATUS_OK);
    assert_eq!(ag_tokenizer_end_of_text(t, &mut eot), AG_STATUS_OK);
    assert_eq!((size, eot), (259, 258));

    let text = b"he he<|endoftext|>\xff";
    let mut needed = 0usize;
    let mut ids = [-1i32; 32];
    // Too small: nothing written, the count reported.
    let st = ag_tokenizer_encode(
        t,
        text.as_ptr(),
        text.len(),
        true,
        ids.as_mut_ptr(),
        2,
        &mut needed,
    );
    expect("ag_tokenizer_encode", st, AG_STATUS_BUFFER_TOO_SMALL);
    assert_eq!(needed, 4);
    assert!(ids.iter().all(|&i| i == -1));
    // Exactly large enough.
    let st = ag_tokenizer_encode(
        t,
        text.as_ptr(),
        text.len(),
        true,
        ids.as_mut_ptr(),
        4,
        &mut needed,
    );
    assert_eq!(st, AG_STATUS_OK, "{}", last_error());
    assert_eq!(needed, 4);
    assert_eq!(&ids[..4], &[256, 257, 258, 0xff]);
    assert!(ids[4..].iter().all(|&i| i == -1), "written past the ids");
    // Without specials the text is ordinary text.
    let st = ag_tokenizer_encode(
        t,
        text.as_ptr(),
        text.len(),
        false,
        ids.as_mut_ptr(),
        32,
        &mut needed,
    );
    assert_eq!(st, AG_STATUS_OK);
    assert!(needed > 4);
    // Empty text needs no pointers.
    let st = ag_tokenizer_encode(t, null(), 0, false, null_mut(), 0, &mut needed);
    assert_eq!((st, needed), (AG_STATUS_OK, 0));

    let back_ids = [256i32, 257, 258, 0xff];
    let mut bytes = [0u8; 32];
    let st = ag_tokenizer_decode(t, back_ids.as_ptr(), 4, bytes.as_mut_ptr(), 3, &mut needed);
    expect("ag_tokenizer_decode", st, AG_STATUS_BUFFER_TOO_SMALL);
    assert_eq!(needed, text.len());
    assert!(bytes.iter().all(|&b| b == 0));
    let st = ag_tokenizer_decode(t, back_ids.as_ptr(), 4, bytes.as_mut_ptr(), 32, &mut needed);
    assert_eq!(st, AG_STATUS_OK);
    assert_eq!(&bytes[..needed], text);

    // Out-of-range ids: the message names the id and its position.
    for bad in [259, -1, i32::MAX, i32::MIN] {
        let ids = [104, bad];
        let mut needed = 77usize;
        let st = ag_tokenizer_decode(t, ids.as_ptr(), 2, bytes.as_mut_ptr(), 32, &mut needed);
        expect("ag_tokenizer_decode", st, AG_STATUS_INDEX_OUT_OF_RANGE);
        let e = last_error();
        assert!(e.contains(&format!("index {bad} at position 1")), "{e}");
        assert_eq!(needed, 77);
    }
    assert_eq!(ag_tokenizer_close(&mut t), AG_STATUS_OK);
    assert!(t.is_null());
}

#[test]
fn null_closed_and_forged_tokenizers_are_refused() {
    let f = Files::new("handles");
    let mut t = f.open();
    let copy = t;
    let mut needed = 0usize;
    let mut ids = [0i32; 4];
    let mut bytes = [0u8; 4];
    let (mut size, mut eot) = (0usize, 0i32);
    let text = b"he";
    // NULL arguments of a live tokenizer.
    let enc = "ag_tokenizer_encode";
    let dec = "ag_tokenizer_decode";
    let st = ag_tokenizer_encode(t, text.as_ptr(), 2, false, ids.as_mut_ptr(), 4, null_mut());
    expect(enc, st, AG_STATUS_NULL_ARGUMENT);
    let st = ag_tokenizer_encode(t, null(), 2, false, ids.as_mut_ptr(), 4, &mut needed);
    expect(enc, st, AG_STATUS_NULL_ARGUMENT);
    let st = ag_tokenizer_encode(t, text.as_ptr(), 2, false, null_mut(), 4, &mut needed);
    expect(enc, st, AG_STATUS_NULL_ARGUMENT);
    let st = ag_tokenizer_encode(
        t,
        text.as_ptr(),
        usize::MAX,
        false,
        ids.as_mut_ptr(),
        4,
        &mut needed,
    );
    expect(enc, st, AG_STATUS_INVALID_ARGUMENT);
    let st = ag_tokenizer_decode(t, null(), 1, bytes.as_mut_ptr(), 4, &mut needed);
    expect(dec, st, AG_STATUS_NULL_ARGUMENT);
    let st = ag_tokenizer_decode(t, ids.as_ptr(), 1, null_mut(), 4, &mut needed);
    expect(dec, st, AG_STATUS_NULL_ARGUMENT);
    let st = ag_tokenizer_decode(t, ids.as_ptr(), 1, bytes.as_mut_ptr(), 4, null_mut());
    expect(dec, st, AG_STATUS_NULL_ARGUMENT);
    let st = ag_tokenizer_decode(
        t,
        ids.as_ptr(),
        1,
        bytes.as_mut_ptr(),
        usize::MAX,
        &mut needed,
    );
    expect(dec, st, AG_STATUS_INVALID_ARGUMENT);
    expect(
        "ag_tokenizer_vocab_size",
        ag_tokenizer_vocab_size(t, null_mut()),
        AG_STATUS_NULL_ARGUMENT,
    );
    expect(
        "ag_tokenizer_end_of_text",
        ag_tokenizer_end_of_text(t, null_mut()),
        AG_STATUS_NULL_ARGUMENT,
    );

    // Closing: NULL and a NULL variable do nothing; a second close through
    // a copy is detected and leaves the copy alone.
    assert_eq!(ag_tokenizer_close(null_mut()), AG_STATUS_OK);
    let mut none: *mut ag_tokenizer = null_mut();
    assert_eq!(ag_tokenizer_close(&mut none), AG_STATUS_OK);
    assert_eq!(ag_tokenizer_close(&mut t), AG_STATUS_OK);
    let mut again = copy;
    expect(
        "ag_tokenizer_close",
        ag_tokenizer_close(&mut again),
        AG_STATUS_INVALID_HANDLE,
    );
    assert_eq!(again, copy);

    // Every call on NULL, closed and forged tokenizers. A new tokenizer
    // never gets the closed one's token.
    let mut other = f.open();
    assert_ne!(other, copy);
    let forged: *mut ag_tokenizer = std::ptr::without_provenance_mut(0xdead_bee0);
    let on_stack = (&mut size as *mut usize).cast::<ag_tokenizer>();
    for (tok, want) in [
        (null_mut(), AG_STATUS_NULL_ARGUMENT),
        (copy, AG_STATUS_INVALID_HANDLE),
        (forged, AG_STATUS_INVALID_HANDLE),
        (on_stack, AG_STATUS_INVALID_HANDLE),
    ] {
        let st = ag_tokenizer_encode(
            tok,
            text.as_ptr(),
            2,
            false,
            ids.as_mut_ptr(),
            4,
            &mut needed,
        );
        expect(enc, st, want);
        let st = ag_tokenizer_decode(tok, ids.as_ptr(), 1, bytes.as_mut_ptr(), 4, &mut needed);
        expect(dec, st, want);
        expect(
            "ag_tokenizer_vocab_size",
            ag_tokenizer_vocab_size(tok, &mut size),
            want,
        );
        expect(
            "ag_tokenizer_end_of_text",
            ag_tokenizer_end_of_text(tok, &mut eot),
            want,
        );
    }
    let mut f2 = forged;
    expect(
        "ag_tokenizer_close",
        ag_tokenizer_close(&mut f2),
        AG_STATUS_INVALID_HANDLE,
    );
    assert_eq!(ag_tokenizer_close(&mut other), AG_STATUS_OK);
}

/// Tokenizers are independent of each other and of the thread that opened
/// them; each thread's last error is its own.
#[test]
fn tokenizers_work_from_other_threads() {
    let f = Files::new("threads");
    let t = f.open() as usize;
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(move || {
                let t = t as *mut ag_tokenizer;
                let mut ids = [0i32; 8];
                let mut needed = 0usize;
                for _ in 0..200 {
                    let st = ag_tokenizer_encode(
                        t,
                        b"he he".as_ptr(),
                        5,
                        false,
                        ids.as_mut_ptr(),
                        8,
                        &mut needed,
                    );
                    // Another thread may be inside a call on it.
                    assert!(st == AG_STATUS_OK || st == AG_STATUS_BUSY, "{st}");
                    if st == AG_STATUS_OK {
                        assert_eq!(&ids[..needed], &[256, 257]);
                    } else {
                        assert!(last_error().contains("in use"), "{}", last_error());
                    }
                }
            });
        }
    });
    let mut t = t as *mut ag_tokenizer;
    assert_eq!(ag_tokenizer_close(&mut t), AG_STATUS_OK);
}

/// The C API gives the Rust API's ids on GPT-2's vocabulary.
#[test]
fn c_api_matches_the_rust_api_on_gpt2() {
    let Some((vocab, merges)) = gpt2_files() else {
        return;
    };
    let Some(mut rust) = gpt2() else { return };
    let c = |p: &Path| CString::new(p.to_str().unwrap()).unwrap();
    let mut t = null_mut();
    let st = ag_tokenizer_open(c(&vocab).as_ptr(), c(&merges).as_ptr(), &mut t);
    assert_eq!(st, AG_STATUS_OK, "{}", last_error());
    let text = fixture("stress.txt");
    let mut needed = 0usize;
    let st = ag_tokenizer_encode(
        t,
        text.as_ptr(),
        text.len(),
        true,
        null_mut(),
        0,
        &mut needed,
    );
    assert_eq!(st, AG_STATUS_BUFFER_TOO_SMALL);
    let mut ids = vec![0i32; needed];
    let st = ag_tokenizer_encode(
        t,
        text.as_ptr(),
        text.len(),
        true,
        ids.as_mut_ptr(),
        ids.len(),
        &mut needed,
    );
    assert_eq!(st, AG_STATUS_OK);
    let mut want = Vec::new();
    rust.encode(&text, true, &mut want);
    assert!(ids.iter().map(|&i| i as u32).eq(want.iter().copied()));
    let mut eot = 0;
    assert_eq!(ag_tokenizer_end_of_text(t, &mut eot), AG_STATUS_OK);
    assert_eq!(eot, 50256);
    assert_eq!(ag_tokenizer_close(&mut t), AG_STATUS_OK);
}

/// src/tokenizer/unicode_tables.rs is what scripts/gen_unicode_tables.py
/// makes from the UCD files, when they are installed (`make
/// tokenizer-data`, which CI runs).
#[test]
fn unicode_tables_are_fresh() {
    let ucd = root().join("data/ucd-16.0.0");
    if !ucd.join("UnicodeData.json").is_file() || !ucd.join("PropList.json").is_file() {
        let why =
            "data/ucd-16.0.0 is absent: run `make tokenizer-data` (scripts/get_unicode_data.sh)";
        assert!(!required(), "{why} (CI is set, so this fails)");
        eprintln!("skipped: {why}");
        return;
    }
    let out = std::process::Command::new("python3")
        .arg(root().join("scripts/gen_unicode_tables.py"))
        .arg("--ucd")
        .arg(&ucd)
        .arg("--check")
        .arg(root().join("src/tokenizer/unicode_tables.rs"))
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            assert!(!required(), "python3: {e}");
            eprintln!("skipped: python3 cannot run: {e}");
            return;
        }
    };
    assert!(
        out.status.success(),
        "src/tokenizer/unicode_tables.rs is stale: run python3 scripts/gen_unicode_tables.py\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
