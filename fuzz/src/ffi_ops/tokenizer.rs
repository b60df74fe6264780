//! The tokenizer: open (a small vocabulary the harness writes, a broken or
//! missing file, NULLs), encode and decode into buffers of fuzzed
//! capacity, close and double close, and the calls on a closed, forged or
//! NULL tokenizer.

use super::{FfiOps, documented, status_name};
use arenagrad::ffi::*;
use std::ffi::{CStr, CString};
use std::path::PathBuf;
use std::ptr::{null, null_mut};

/// The small vocabulary: the 256 byte tokens (ids 0..256, in byte order),
/// then these merges (ids 256..), then <|endoftext|>.
const MERGES: [(&str, &str); 3] = [("Ġ", "t"), ("h", "e"), ("Ġt", "he")];
const VOCAB_SIZE: usize = 256 + MERGES.len() + 1;
const END_OF_TEXT: i32 = (256 + MERGES.len()) as i32;
/// What a buffer holds before a call that must not write it.
const FILL_ID: i32 = -7777;
const FILL_BYTE: u8 = 0xEE;

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

/// The vocabulary and merges files' contents.
fn small_vocabulary() -> (String, String) {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    tokens.extend(MERGES.iter().map(|(l, r)| format!("{l}{r}")));
    tokens.push("<|endoftext|>".into());
    let entries: Vec<String> = tokens
        .iter()
        .enumerate()
        .map(|(id, t)| {
            let escaped = t.replace('\\', "\\\\").replace('"', "\\\"");
            format!("\"{escaped}\": {id}")
        })
        .collect();
    let json = format!("{{{}}}", entries.join(", "));
    let mut merges = String::from("#version: 0.2\n");
    for (l, r) in MERGES {
        merges.push_str(&format!("{l} {r}\n"));
    }
    (json, merges)
}

fn c_path(p: &std::path::Path) -> CString {
    CString::new(p.to_string_lossy().as_bytes()).unwrap()
}

fn tokenizer_error() -> String {
    let p = ag_tokenizer_last_error();
    assert!(!p.is_null(), "ag_tokenizer_last_error returned NULL");
    // SAFETY: documented as a NUL-terminated string valid until the next
    // tokenizer call on this thread.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .expect("tokenizer error is not UTF-8")
        .to_owned()
}

impl FfiOps<'_> {
    /// Counts one tokenizer call and checks its status is one the header
    /// lists; a failure must leave a message naming the function.
    fn tokenizer_call(&mut self, func: &str, st: ag_status) {
        self.calls += 1;
        assert!(documented(st), "{func}: undocumented status {st}");
        if st == AG_STATUS_OK {
            self.ok += 1;
            self.by_id[self.id as usize].1 += 1;
        } else {
            let e = tokenizer_error();
            assert!(
                e.starts_with(func) || e.starts_with("tokenizer"),
                "{func} -> {}: message {e:?}",
                status_name(st)
            );
        }
    }

    /// The two files of the small vocabulary, written once per run.
    fn vocabulary_files(&mut self) -> (PathBuf, PathBuf) {
        let (vocab, merges) = (self.dir.join("vocab.json"), self.dir.join("merges.txt"));
        if !vocab.exists() || !merges.exists() {
            let _ = std::fs::create_dir_all(&self.dir);
            let (json, text) = small_vocabulary();
            std::fs::write(&vocab, json).unwrap();
            std::fs::write(&merges, text).unwrap();
        }
        (vocab, merges)
    }

    /// The tokenizer the calls use, opened on first need.
    fn open_tokenizer(&mut self) -> *mut ag_tokenizer {
        if self.tok.is_null() {
            let (vocab, merges) = self.vocabulary_files();
            let mut t = null_mut();
            let st = ag_tokenizer_open(c_path(&vocab).as_ptr(), c_path(&merges).as_ptr(), &mut t);
            assert_eq!(st, AG_STATUS_OK, "{}", tokenizer_error());
            self.tok = t;
        }
        self.tok
    }

    /// An open tokenizer (mostly), NULL, or a closed or forged one; and
    /// whether it is open.
    fn tokenizer_target(&mut self) -> (*mut ag_tokenizer, bool) {
        let b = self.input.u8();
        match b {
            0..=223 => (self.open_tokenizer(), true),
            224..=239 => (null_mut(), false),
            _ => {
                let dead = self.dead_tokenizers[b as usize % self.dead_tokenizers.len()];
                (std::ptr::without_provenance_mut(dead), false)
            }
        }
    }

    pub(super) fn tokenizer_open(&mut self) {
        let k = self.input.u8();
        let (vocab, merges) = self.vocabulary_files();
        let (vocab, merges) = match k % 4 {
            0 => (c_path(&vocab), c_path(&merges)),
            1 => {
                // One of the files cut short.
                let cut = self.input.u16() as usize;
                let (from, to) = if k & 4 == 0 {
                    (vocab.clone(), self.dir.join("cut.json"))
                } else {
                    (merges.clone(), self.dir.join("cut.txt"))
                };
                let bytes = std::fs::read(&from).unwrap();
                std::fs::write(&to, &bytes[..cut % bytes.len()]).unwrap();
                if k & 4 == 0 {
                    (c_path(&to), c_path(&merges))
                } else {
                    (c_path(&vocab), c_path(&to))
                }
            }
            2 => (c_path(&self.dir.join("missing.json")), c_path(&merges)),
            _ => (c_path(&vocab), CString::default()),
        };
        let null_out = k & 8 != 0;
        let null_path = k & 16 != 0;
        let mut t: *mut ag_tokenizer = std::ptr::without_provenance_mut(0x5a5a_5a40);
        let before = t;
        let st = ag_tokenizer_open(
            if null_path { null() } else { vocab.as_ptr() },
            merges.as_ptr(),
            if null_out { null_mut() } else { &mut t },
        );
        self.tokenizer_call("ag_tokenizer_open", st);
        if null_out || null_path {
            assert_eq!(st, AG_STATUS_NULL_ARGUMENT);
        }
        match k % 4 {
            0 | 1 => assert!(
                matches!(
                    st,
                    AG_STATUS_OK | AG_STATUS_CHECKPOINT_CORRUPT | AG_STATUS_NULL_ARGUMENT
                ),
                "ag_tokenizer_open: {}",
                status_name(st)
            ),
            2 => assert!(matches!(st, AG_STATUS_IO | AG_STATUS_NULL_ARGUMENT)),
            _ => assert!(matches!(
                st,
                AG_STATUS_INVALID_ARGUMENT | AG_STATUS_NULL_ARGUMENT
            )),
        }
        if st != AG_STATUS_OK {
            assert_eq!(t, before, "ag_tokenizer_open wrote out on failure");
            return;
        }
        // A cut merges file that still loads has fewer merges: use it once,
        // then close it; a whole one replaces the harness's tokenizer.
        let mut size = 0usize;
        assert_eq!(ag_tokenizer_vocab_size(t, &mut size), AG_STATUS_OK);
        assert_eq!(size, VOCAB_SIZE);
        if k.is_multiple_of(4) {
            let mut old = std::mem::replace(&mut self.tok, t);
            assert_eq!(ag_tokenizer_close(&mut old), AG_STATUS_OK);
        } else {
            let mut t = t;
            assert_eq!(ag_tokenizer_close(&mut t), AG_STATUS_OK);
            assert!(t.is_null());
        }
    }

    pub(super) fn tokenizer_encode(&mut self) {
        let (t, open) = self.tokenizer_target();
        let len = self.input.u8() as usize % 96;
        let text = self.input.take(len).to_vec();
        let k = self.input.u8();
        let allow_special = k & 1 != 0;
        let capacity = (k >> 1) as usize % 100;
        let mut ids = vec![FILL_ID; capacity];
        let mut needed = 12345usize;
        let null_ids = k == 255;
        let st = ag_tokenizer_encode(
            t,
            text.as_ptr(),
            text.len(),
            allow_special,
            if null_ids {
                null_mut()
            } else {
                ids.as_mut_ptr()
            },
            capacity,
            &mut needed,
        );
        self.tokenizer_call("ag_tokenizer_encode", st);
        if !open {
            let want = if t.is_null() {
                AG_STATUS_NULL_ARGUMENT
            } else {
                AG_STATUS_INVALID_HANDLE
            };
            assert_eq!(st, want);
        }
        match st {
            AG_STATUS_OK => {
                assert!(needed <= capacity);
                assert!(ids[needed..].iter().all(|&i| i == FILL_ID));
                let mut back = vec![FILL_BYTE; text.len()];
                let mut n = 0usize;
                let st = ag_tokenizer_decode(
                    t,
                    ids.as_ptr(),
                    needed,
                    back.as_mut_ptr(),
                    back.len(),
                    &mut n,
                );
                self.tokenizer_call("ag_tokenizer_decode", st);
                assert_eq!(st, AG_STATUS_OK, "{}", tokenizer_error());
                assert_eq!(&back[..n], &text[..], "decode(encode(x)) != x");
                assert_eq!(n, text.len());
            }
            AG_STATUS_BUFFER_TOO_SMALL => {
                assert!(needed > capacity);
                assert!(ids.iter().all(|&i| i == FILL_ID), "written when too small");
            }
            _ => {
                assert_eq!(needed, 12345, "needed written on failure");
                assert!(ids.iter().all(|&i| i == FILL_ID), "written on failure");
            }
        }
    }

    pub(super) fn tokenizer_decode(&mut self) {
        let (t, open) = self.tokenizer_target();
        let n = self.input.u8() as usize % 24;
        // Mostly in range; some negative or past the vocabulary.
        let ids: Vec<i32> = (0..n)
            .map(|_| i32::from(self.input.u16() as i16) % 300)
            .collect();
        let capacity = self.input.u8() as usize;
        let mut bytes = vec![FILL_BYTE; capacity];
        let mut needed = 12345usize;
        let st = ag_tokenizer_decode(
            t,
            ids.as_ptr(),
            ids.len(),
            bytes.as_mut_ptr(),
            capacity,
            &mut needed,
        );
        self.tokenizer_call("ag_tokenizer_decode", st);
        let in_range = ids.iter().all(|&i| (0..VOCAB_SIZE as i32).contains(&i));
        if !open {
            assert!(matches!(
                st,
                AG_STATUS_NULL_ARGUMENT | AG_STATUS_INVALID_HANDLE
            ));
        } else if !in_range {
            assert_eq!(st, AG_STATUS_INDEX_OUT_OF_RANGE);
            let bad = ids.iter().find(|&&i| !(0..VOCAB_SIZE as i32).contains(&i));
            let e = tokenizer_error();
            assert!(e.contains(&bad.unwrap().to_string()), "{e}");
        }
        match st {
            AG_STATUS_OK => {
                assert!(needed <= capacity);
                assert!(bytes[needed..].iter().all(|&b| b == FILL_BYTE));
                // Re-encoding without specials gives the ids back when
                // they are what encoding makes; at least the bytes agree.
                let text = bytes[..needed].to_vec();
                self.tokenizer_round_trip(t, &text);
            }
            AG_STATUS_BUFFER_TOO_SMALL => {
                assert!(needed > capacity);
                assert!(bytes.iter().all(|&b| b == FILL_BYTE));
            }
            _ => {
                assert_eq!(needed, 12345);
                assert!(bytes.iter().all(|&b| b == FILL_BYTE));
            }
        }
    }

    /// Encodes `text` with room to spare and decodes it back.
    fn tokenizer_round_trip(&mut self, t: *mut ag_tokenizer, text: &[u8]) {
        let mut ids = vec![FILL_ID; text.len()];
        let mut n = 0usize;
        let st = ag_tokenizer_encode(
            t,
            text.as_ptr(),
            text.len(),
            false,
            ids.as_mut_ptr(),
            ids.len(),
            &mut n,
        );
        self.tokenizer_call("ag_tokenizer_encode", st);
        assert_eq!(st, AG_STATUS_OK, "{}", tokenizer_error());
        let mut back = vec![FILL_BYTE; text.len()];
        let mut m = 0usize;
        let st = ag_tokenizer_decode(t, ids.as_ptr(), n, back.as_mut_ptr(), back.len(), &mut m);
        self.tokenizer_call("ag_tokenizer_decode", st);
        assert_eq!(st, AG_STATUS_OK, "{}", tokenizer_error());
        assert_eq!(&back[..m], text);
    }

    pub(super) fn tokenizer_close(&mut self) {
        if self.tok.is_null() || self.input.u8() & 1 == 1 {
            self.calls += 1;
            assert_eq!(ag_tokenizer_close(null_mut()), AG_STATUS_OK);
            let mut none: *mut ag_tokenizer = null_mut();
            assert_eq!(ag_tokenizer_close(&mut none), AG_STATUS_OK);
            return;
        }
        let mut t = std::mem::replace(&mut self.tok, null_mut());
        let copy = t;
        let st = ag_tokenizer_close(&mut t);
        self.tokenizer_call("ag_tokenizer_close", st);
        assert_eq!(st, AG_STATUS_OK);
        assert!(t.is_null());
        let mut again = copy;
        let st = ag_tokenizer_close(&mut again);
        self.tokenizer_call("ag_tokenizer_close", st);
        assert_eq!(st, AG_STATUS_INVALID_HANDLE);
        assert_eq!(again, copy, "a failed close cleared the pointer");
        self.dead_tokenizers.push(copy as usize);
    }

    pub(super) fn tokenizer_info(&mut self) {
        let (t, open) = self.tokenizer_target();
        let mut size = 777usize;
        let st = ag_tokenizer_vocab_size(t, &mut size);
        self.tokenizer_call("ag_tokenizer_vocab_size", st);
        let mut eot = 777i32;
        let st2 = ag_tokenizer_end_of_text(t, &mut eot);
        self.tokenizer_call("ag_tokenizer_end_of_text", st2);
        if open {
            assert_eq!((st, st2), (AG_STATUS_OK, AG_STATUS_OK));
            assert_eq!((size, eot), (VOCAB_SIZE, END_OF_TEXT));
            let st = ag_tokenizer_vocab_size(t, null_mut());
            self.tokenizer_call("ag_tokenizer_vocab_size", st);
            assert_eq!(st, AG_STATUS_NULL_ARGUMENT);
        } else {
            assert_eq!(st, st2);
            assert_ne!(st, AG_STATUS_OK);
            assert_eq!((size, eot), (777, 777), "written on failure");
        }
        self.calls += 1;
        let _ = tokenizer_error();
    }

    /// At the end of an input: the tokenizer still round-trips, then is
    /// closed.
    pub(super) fn tokenizer_finish(&mut self) {
        if self.tok.is_null() {
            return;
        }
        let t = self.tok;
        self.tokenizer_round_trip(t, b"the the\xff <|endoftext|>");
        let mut t = std::mem::replace(&mut self.tok, null_mut());
        assert_eq!(ag_tokenizer_close(&mut t), AG_STATUS_OK);
    }
}
