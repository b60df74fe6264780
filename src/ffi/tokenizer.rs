//! The GPT-2 tokenizer from C: open a vocabulary, encode bytes to int32_t
//! ids, decode ids to bytes, close; the last error of this thread's
//! tokenizer calls.
//!
//! An `ag_tokenizer *` is a token, as a context's is: a number from a
//! counter that is never reused, looked up in a table of open tokenizers,
//! never dereferenced. A closed or forged token is simply not in the table
//! (INVALID_HANDLE). The table holds each tokenizer behind its own lock,
//! taken with `try_lock`, so a call made while another thread is inside a
//! call on the same tokenizer gets BUSY instead of waiting.

use super::prelude::*;
use crate::tokenizer::{Fit, TokenId, Tokenizer};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

/// A GPT-2 tokenizer (opaque): a vocabulary and its merges, loaded by
/// ag_tokenizer_open, released by ag_tokenizer_close. Use it from one thread
/// at a time (a concurrent call gets AG_STATUS_BUSY). An `ag_tokenizer *` is
/// a token, not an address: never dereference it. Tokens are never reused,
/// so a call with a closed tokenizer is detected (INVALID_HANDLE).
pub struct ag_tokenizer {
    tokenizer: Tokenizer,
    /// Set by close while it holds the lock: a call that found the entry
    /// before it was removed from the table must not use it.
    closed: bool,
    /// Set when a call panicked: the tokenizer's cache may be half written.
    poisoned: bool,
}

type Entry = Arc<Mutex<ag_tokenizer>>;

/// Open tokenizers by token. Bounded by the number open at once (entries
/// are removed at close).
static TABLE: Mutex<BTreeMap<usize, Entry>> = Mutex::new(BTreeMap::new());
/// The next token's sequence number; tokens are multiples of 64 (never
/// NULL, aligned like a pointer) and 2^58 opens would be needed to wrap.
static NEXT_SEQ: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    /// The message of the last failed tokenizer call on this thread.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn table() -> MutexGuard<'static, BTreeMap<usize, Entry>> {
    // No panic happens while the lock is held, but stay usable anyway.
    TABLE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A failed call: its status and the message ag_tokenizer_last_error gives.
struct Failure {
    status: ag_status,
    message: String,
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        Failure {
            status: e.status(),
            message: e.to_string(),
        }
    }
}

fn failure(status: ag_status, message: String) -> Failure {
    Failure { status, message }
}

/// Records the message of a failed call and returns its status.
fn report(result: std::result::Result<ag_status, Failure>) -> ag_status {
    match result {
        Ok(status) => status,
        Err(f) => {
            let message = CString::new(f.message.replace('\0', " ")).unwrap_or_default();
            LAST_ERROR.with(|m| *m.borrow_mut() = message);
            f.status
        }
    }
}

/// Turns a caught panic into PANIC with its message.
fn panicked(func: &str, payload: &(dyn std::any::Any + Send)) -> Failure {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    failure(
        AG_STATUS_PANIC,
        format!("{func}: internal panic caught ({what}); the tokenizer is poisoned"),
    )
}

/// The entry of a live tokenizer token.
fn lookup(func: &str, tok: *const ag_tokenizer) -> std::result::Result<Entry, Failure> {
    table().get(&(tok as usize)).cloned().ok_or_else(|| {
        failure(
            AG_STATUS_INVALID_HANDLE,
            format!("{func}: tokenizer is not open (closed, or never opened)"),
        )
    })
}

/// Runs `f` on the live, idle, unpoisoned tokenizer behind `tok`: NULL and
/// liveness checks, the busy check, panic capture, the last error. `f`
/// returns OK or a status that is not an error of the tokenizer (such as
/// BUFFER_TOO_SMALL, which sets its own message).
fn with_tokenizer(
    func: &'static str,
    tok: *mut ag_tokenizer,
    f: impl FnOnce(&mut Tokenizer) -> std::result::Result<ag_status, Failure>,
) -> ag_status {
    let run = || {
        if tok.is_null() {
            return Err(Error::NullArgument {
                func,
                arg: "tokenizer",
            }
            .into());
        }
        let entry = lookup(func, tok)?;
        let mut guard = match entry.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                return Err(failure(
                    AG_STATUS_BUSY,
                    format!("{func}: tokenizer is in use by another thread"),
                ));
            }
        };
        let t = &mut *guard;
        if t.closed {
            return Err(failure(
                AG_STATUS_INVALID_HANDLE,
                format!("{func}: tokenizer is not open (closed, or never opened)"),
            ));
        }
        if t.poisoned {
            return Err(failure(
                AG_STATUS_POISONED,
                format!(
                    "{func}: tokenizer was poisoned by an earlier panic; only ag_tokenizer_close is allowed"
                ),
            ));
        }
        match catch_unwind(AssertUnwindSafe(|| f(&mut t.tokenizer))) {
            Ok(result) => result,
            Err(payload) => {
                t.poisoned = true;
                Err(panicked(func, payload.as_ref()))
            }
        }
    };
    report(run())
}

/// Delivers a `Fit` to the caller: the length to `*needed`, and OK or
/// BUFFER_TOO_SMALL (with a message naming both lengths).
fn deliver(
    func: &'static str,
    what: &str,
    fit: Fit,
    capacity: usize,
    needed: *mut usize,
) -> std::result::Result<ag_status, Failure> {
    match fit {
        Fit::Written(n) => {
            write_out(func, "needed", needed, n)?;
            Ok(AG_STATUS_OK)
        }
        Fit::Needed(n) => {
            write_out(func, "needed", needed, n)?;
            Err(failure(
                AG_STATUS_BUFFER_TOO_SMALL,
                format!("{func}: the result is {n} {what}, the buffer holds {capacity}"),
            ))
        }
    }
}

/// Loads GPT-2's vocabulary from `vocab_json_path` (encoder.json: token text
/// to id) and `merges_path` (vocab.bpe: one merge per line, in rank order)
/// and writes the new tokenizer to `*out`. Close it with ag_tokenizer_close.
/// Encoding gives the ids of Hugging Face `tokenizers` (a BPE model from the
/// same two files with the byte-level pre-tokenizer, no prefix space).
/// Errors: NULL_ARGUMENT (out, or a path), INVALID_ARGUMENT (a path is empty
/// or not UTF-8), IO (a file cannot be read), CHECKPOINT_CORRUPT (a file is
/// malformed: not a JSON object of token to id, ids not 0..n each once, a
/// byte without its token, no <|endoftext|>, a merge line not two tokens of
/// the vocabulary). The message (ag_tokenizer_last_error) names the file.
#[unsafe(no_mangle)]
pub extern "C" fn ag_tokenizer_open(
    vocab_json_path: *const c_char,
    merges_path: *const c_char,
    out: *mut *mut ag_tokenizer,
) -> ag_status {
    const FUNC: &str = "ag_tokenizer_open";
    let run = || {
        need(FUNC, "out", out)?;
        let vocab = path_arg(FUNC, vocab_json_path)?;
        let merges = path_arg(FUNC, merges_path)?;
        let tokenizer = Tokenizer::from_files(vocab, merges)?;
        let token = NEXT_SEQ.fetch_add(1, Ordering::Relaxed) << 6;
        let entry = Arc::new(Mutex::new(ag_tokenizer {
            tokenizer,
            closed: false,
            poisoned: false,
        }));
        table().insert(token, entry);
        write_out(FUNC, "out", out, std::ptr::without_provenance_mut(token))?;
        Ok(AG_STATUS_OK)
    };
    report(
        catch_unwind(AssertUnwindSafe(run))
            .unwrap_or_else(|payload| Err(panicked(FUNC, payload.as_ref()))),
    )
}

/// Closes the tokenizer `*tok` and sets `*tok` to NULL. `tok == NULL` or
/// `*tok == NULL` does nothing and returns OK. A tokenizer already closed
/// (through another copy of the pointer) is detected: INVALID_HANDLE, and
/// nothing is released twice. Works on poisoned tokenizers.
/// Errors (only these): INVALID_HANDLE (not open), BUSY (another thread is
/// inside a call on it).
#[unsafe(no_mangle)]
pub extern "C" fn ag_tokenizer_close(tok: *mut *mut ag_tokenizer) -> ag_status {
    const FUNC: &str = "ag_tokenizer_close";
    if tok.is_null() {
        return AG_STATUS_OK;
    }
    let handle = match slice_in(FUNC, "tok", tok.cast_const(), 1) {
        Ok(&[h]) if !h.is_null() => h,
        _ => return AG_STATUS_OK,
    };
    let run = || {
        let token = handle as usize;
        let mut table = table();
        let entry = table.get(&token).cloned().ok_or_else(|| {
            failure(
                AG_STATUS_INVALID_HANDLE,
                format!("{FUNC}: tokenizer is not open (closed, or never opened)"),
            )
        })?;
        match entry.try_lock() {
            Ok(mut t) => t.closed = true,
            Err(TryLockError::Poisoned(p)) => p.into_inner().closed = true,
            Err(TryLockError::WouldBlock) => {
                return Err(failure(
                    AG_STATUS_BUSY,
                    format!("{FUNC}: tokenizer is in use by another thread"),
                ));
            }
        }
        table.remove(&token);
        Ok(AG_STATUS_OK)
    };
    let st = report(
        catch_unwind(AssertUnwindSafe(run))
            .unwrap_or_else(|payload| Err(panicked(FUNC, payload.as_ref()))),
    );
    if st == AG_STATUS_OK {
        // Cannot fail: tok is not NULL.
        let _ = write_out(FUNC, "tok", tok, std::ptr::null_mut());
    }
    st
}

/// Encodes `len` bytes of `text` (any bytes: invalid UTF-8 never fails, each
/// byte outside a well-formed sequence becomes its own token, so decoding
/// gives the bytes back) into token ids. With `allow_special`, each
/// "<|endoftext|>" in the text becomes ag_tokenizer_end_of_text's id;
/// without it, that text is ordinary text. On OK the ids are in
/// `ids[0..*needed]`; when they are more than `capacity`, nothing is written
/// to `ids`, `*needed` is their count and BUFFER_TOO_SMALL is returned (call
/// again with a buffer that large).
/// Errors: NULL_ARGUMENT (tok, needed, text when len > 0, ids when
/// capacity > 0), INVALID_HANDLE (tok is not open), BUSY (another thread is
/// inside a call on tok), POISONED (an earlier call on tok panicked),
/// INVALID_ARGUMENT (len or capacity larger than any buffer),
/// BUFFER_TOO_SMALL.
#[unsafe(no_mangle)]
pub extern "C" fn ag_tokenizer_encode(
    tok: *mut ag_tokenizer,
    text: *const u8,
    len: usize,
    allow_special: bool,
    ids: *mut i32,
    capacity: usize,
    needed: *mut usize,
) -> ag_status {
    const FUNC: &str = "ag_tokenizer_encode";
    with_tokenizer(FUNC, tok, |t| {
        need(FUNC, "needed", needed)?;
        let text = slice_in(FUNC, "text", text, len)?;
        let ids = slice_out(FUNC, "ids", ids, capacity)?;
        let fit = t.encode_to_buffer(text, allow_special, ids);
        deliver(FUNC, "ids", fit, capacity, needed)
    })
}

/// Decodes `n` token ids into the bytes they stand for (not necessarily
/// valid UTF-8, and not NUL-terminated). On OK the bytes are in
/// `bytes[0..*needed]`; when they are more than `capacity`, nothing is
/// written to `bytes`, `*needed` is their count and BUFFER_TOO_SMALL is
/// returned.
/// Errors: NULL_ARGUMENT (tok, needed, ids when n > 0, bytes when
/// capacity > 0), INVALID_HANDLE (tok is not open), BUSY (another thread is
/// inside a call on tok), POISONED (an earlier call on tok panicked),
/// INVALID_ARGUMENT (n or capacity larger than any buffer),
/// INDEX_OUT_OF_RANGE (an id outside [0, vocabulary size): the message
/// names the first one and its position; nothing is written),
/// BUFFER_TOO_SMALL.
#[unsafe(no_mangle)]
pub extern "C" fn ag_tokenizer_decode(
    tok: *mut ag_tokenizer,
    ids: *const i32,
    n: usize,
    bytes: *mut u8,
    capacity: usize,
    needed: *mut usize,
) -> ag_status {
    const FUNC: &str = "ag_tokenizer_decode";
    with_tokenizer(FUNC, tok, |t| {
        need(FUNC, "needed", needed)?;
        let ids = slice_in(FUNC, "ids", ids, n)?;
        let bytes = slice_out(FUNC, "bytes", bytes, capacity)?;
        let fit = t.decode_to_buffer(ids, bytes)?;
        deliver(FUNC, "bytes", fit, capacity, needed)
    })
}

/// Writes the number of tokens (50257 for GPT-2) to `*out`: every id is
/// below it.
/// Errors: NULL_ARGUMENT (tok, out), INVALID_HANDLE (tok is not open), BUSY
/// (another thread is inside a call on tok), POISONED (an earlier call on
/// tok panicked).
#[unsafe(no_mangle)]
pub extern "C" fn ag_tokenizer_vocab_size(tok: *mut ag_tokenizer, out: *mut usize) -> ag_status {
    const FUNC: &str = "ag_tokenizer_vocab_size";
    with_tokenizer(FUNC, tok, |t| {
        write_out(FUNC, "out", out, t.vocab_size())?;
        Ok(AG_STATUS_OK)
    })
}

/// Writes the id of "<|endoftext|>" (50256 for GPT-2), GPT-2's document
/// separator, to `*out`.
/// Errors: NULL_ARGUMENT (tok, out), INVALID_HANDLE (tok is not open), BUSY
/// (another thread is inside a call on tok), POISONED (an earlier call on
/// tok panicked).
#[unsafe(no_mangle)]
pub extern "C" fn ag_tokenizer_end_of_text(tok: *mut ag_tokenizer, out: *mut i32) -> ag_status {
    const FUNC: &str = "ag_tokenizer_end_of_text";
    with_tokenizer(FUNC, tok, |t| {
        write_out(FUNC, "out", out, i32::from_id(t.end_of_text()))?;
        Ok(AG_STATUS_OK)
    })
}

/// The message of the last failed ag_tokenizer_* call on the calling thread
/// (naming the function, and the file, id or lengths at fault); empty if
/// none failed yet. Valid until the next ag_tokenizer_* call on this
/// thread; never free it. Never NULL.
#[unsafe(no_mangle)]
pub extern "C" fn ag_tokenizer_last_error() -> *const c_char {
    catch_unwind(|| LAST_ERROR.with(|m| m.borrow().as_ptr()))
        .unwrap_or(c"ag_tokenizer_last_error: panic".as_ptr())
}
