//! The statuses the header documents are the statuses the library returns.
//!
//! The header's comment of every `ag_status` function ends with an
//! "Errors:" list; its conventions block adds the statuses any function
//! taking a context may return (NULL_ARGUMENT, INVALID_CONTEXT, BUSY,
//! POISONED, PANIC) and, for functions that make a tensor, ALLOCATION_FAILED
//! and TOO_LARGE from the tensor table and SEQUENCE while a captured step is
//! the current iteration. This file parses those lists and
//! * calls every function over a catalogue of bad inputs (NULL pointers,
//!   zero, stale, foreign and forged handles, wrong and impossible lengths,
//!   NaN hyper-parameters, missing files) on a fresh context each time, and
//!   fails on any status the function does not document;
//! * calls every context function with a NULL, a freed and a poisoned
//!   context;
//! * provokes the statuses of the contract fixes one by one, and checks that
//!   each documented status of each function was returned at least once by
//!   the catalogue or a targeted case.

#[path = "common/c_function_rows.rs"]
mod c_function_rows;

use arenagrad::ffi::*;
use c_function_rows::rows_named;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{CStr, CString};
use std::ptr::{null, null_mut};

const COMMON: &[&str] = &[
    "NULL_ARGUMENT",
    "INVALID_CONTEXT",
    "BUSY",
    "POISONED",
    "PANIC",
];
const TENSOR_MAKER: &[&str] = &["ALLOCATION_FAILED", "TOO_LARGE", "SEQUENCE"];

fn status_names() -> BTreeMap<ag_status, String> {
    let header = read("include/arenagrad.h");
    header
        .lines()
        .filter_map(|l| l.strip_prefix("#define AG_STATUS_"))
        .map(|r| {
            let mut it = r.split_whitespace();
            let name = it.next().unwrap().to_string();
            let v: ag_status = it.next().unwrap().parse().unwrap();
            (v, name)
        })
        .collect()
}

/// A gradient-ready callback that does nothing.
unsafe extern "C" fn grad_ready_noop(_: *mut std::ffi::c_void, _: usize, _: usize) {}

fn read(rel: &str) -> String {
    std::fs::read_to_string(format!("{}/{rel}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// What the header says about one function.
#[derive(Debug, Default)]
struct Doc {
    errors: BTreeSet<String>,
    takes_ctx: bool,
    makes_tensor: bool,
}

impl Doc {
    fn allows(&self, name: &str) -> bool {
        name == "OK"
            || self.errors.contains(name)
            || (self.takes_ctx && COMMON.contains(&name))
            || (self.makes_tensor && TENSOR_MAKER.contains(&name))
            || name == "PANIC"
    }
}

/// Every `ag_status ag_*(...)` declaration of the public header and the
/// test-hooks header, with the status names of its "Errors:" clause.
fn docs() -> BTreeMap<String, Doc> {
    let known: BTreeSet<String> = status_names().into_values().collect();
    let mut out = BTreeMap::new();
    for file in ["include/arenagrad.h", "tests/c/arenagrad_test_hooks.h"] {
        let text = read(file);
        let mut comment = String::new();
        for line in text.lines() {
            if let Some(c) = line.strip_prefix("//") {
                comment.push_str(c);
                comment.push(' ');
                continue;
            }
            // A deprecated alias's declaration starts with AG_DEPRECATED("...").
            let line = match line.strip_prefix("AG_DEPRECATED(") {
                Some(r) => r.split_once(") ").map_or(line, |(_, decl)| decl),
                None => line,
            };
            if let Some(rest) = line.strip_prefix("ag_status ag_") {
                let name = format!("ag_{}", &rest[..rest.find('(').unwrap()]);
                let clause = comment
                    .find("Errors")
                    .map(|i| &comment[i..])
                    .unwrap_or_else(|| panic!("{name}: no \"Errors:\" clause in {file}"));
                let errors: BTreeSet<String> = clause
                    .split(|c: char| !(c.is_ascii_uppercase() || c == '_'))
                    .filter(|w| known.contains(*w))
                    .map(str::to_string)
                    .collect();
                let none = clause.contains("none of its own");
                assert!(
                    none == errors.is_empty(),
                    "{name}: Errors clause must list statuses or say \"none of its own\": {clause}"
                );
                let args = &rest[rest.find('(').unwrap()..];
                out.insert(
                    name,
                    Doc {
                        errors,
                        takes_ctx: args.starts_with("(struct ag_context *ctx"),
                        makes_tensor: args.contains("struct ag_tensor *out)"),
                    },
                );
            }
            comment.clear();
        }
    }
    out
}

// ---- a fixture and one call per function -------------------------------------

const BUF: usize = 64;

/// A context with parameters w [4, 3] and b [3], a stale activation from
/// the first iteration, and in the second: x [2, 4] (constant),
/// h = linear(x, w, b) [2, 3], and a column [65536, 1] and a row [1, 65536]
/// whose products and broadcasts pass the 2^31 - 1 element cap.
struct Fx {
    ctx: *mut ag_context,
    w: ag_tensor,
    b: ag_tensor,
    x: ag_tensor,
    h: ag_tensor,
    stale: ag_tensor,
    col: ag_tensor,
    row: ag_tensor,
}

fn ok(st: ag_status) {
    assert_eq!(st, AG_STATUS_OK);
}

impl Fx {
    fn new() -> Fx {
        let mut ctx = null_mut();
        ok(ag_context_new(&mut ctx));
        let mut w = zero();
        let mut b = zero();
        let wv: Vec<f32> = (0..12).map(|i| 0.1 * i as f32 - 0.5).collect();
        ok(ag_param_new(ctx, [4, 3].as_ptr(), 2, wv.as_ptr(), &mut w));
        ok(ag_param_new(ctx, [3].as_ptr(), 1, null(), &mut b));
        let xv = [0.25f32; 8];
        let mut stale = zero();
        ok(ag_tensor_new(
            ctx,
            [2, 4].as_ptr(),
            2,
            xv.as_ptr(),
            &mut stale,
        ));
        ok(ag_reset(ctx));
        let mut x = zero();
        let mut h = zero();
        ok(ag_tensor_new(ctx, [2, 4].as_ptr(), 2, xv.as_ptr(), &mut x));
        ok(ag_linear(ctx, x, w, &b, &mut h));
        let big = vec![0.5f32; 1 << 16];
        let mut col = zero();
        let mut row = zero();
        ok(ag_tensor_new(
            ctx,
            [1 << 16, 1].as_ptr(),
            2,
            big.as_ptr(),
            &mut col,
        ));
        ok(ag_tensor_new(
            ctx,
            [1, 1 << 16].as_ptr(),
            2,
            big.as_ptr(),
            &mut row,
        ));
        Fx {
            ctx,
            w,
            b,
            x,
            h,
            stale,
            col,
            row,
        }
    }
}

impl Drop for Fx {
    fn drop(&mut self) {
        ag_context_free(&mut self.ctx);
    }
}

fn zero() -> ag_tensor {
    ag_tensor {
        index: 0,
        context: 0,
        generation: 0,
    }
}

/// One catalogue entry: which handle, NULL or real pointers, which length
/// (the context is put in one of the states of `prepare` first).
#[derive(Clone, Copy, Debug)]
struct Args {
    handle: usize,
    null: bool,
    n: usize,
}

const HANDLES: usize = 9;
const STATES: u8 = 4;

/// 0: as made; 1: a 1-byte arena cap (the next arena allocation fails);
/// 2: every persistent allocation fails (test hook); 3: an AdamW
/// optimizer exists and its step ran once with NaN gradients pending.
fn prepare(fx: &Fx, state: u8) {
    let c = fx.ctx;
    match state {
        1 => ok(ag_set_arena_limit(c, 1)),
        2 => ok(ag_test_fail_allocation(c, 1, true, null_mut())),
        3 => {
            ok(ag_optimizer_adamw(c, 1e-3, 0.9, 0.999, 1e-8, 0.0));
            let mut inf = zero();
            let mut loss = zero();
            ok(ag_scale(c, fx.h, f32::INFINITY, &mut inf));
            ok(ag_sum(c, inf, &mut loss));
            ok(ag_backward(c, loss));
        }
        _ => {}
    }
}
const LENGTHS: [usize; 6] = [0, 1, 2, 12, BUF, usize::MAX];

struct Env {
    dir: std::path::PathBuf,
    foreign: Fx,
    ckpt: Vec<u8>,
}

impl Env {
    fn new() -> Env {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("ag_status_contract.{}.{k}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let foreign = Fx::new();
        let path = CString::new(dir.join("foreign.ckpt").to_str().unwrap()).unwrap();
        ok(ag_checkpoint_save(
            foreign.ctx,
            path.as_ptr(),
            b"u".as_ptr(),
            1,
        ));
        let ckpt = std::fs::read(dir.join("foreign.ckpt")).unwrap();
        Env { dir, foreign, ckpt }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Calls `name` on `ctx` with arguments made from `a` (and the fixture's
/// handles). Pointers are either NULL or buffers of BUF elements; lengths
/// above BUF are only usize::MAX, which every function refuses before
/// touching memory.
#[allow(deprecated)] // also calls the deprecated aliases
fn call(name: &str, ctx: *mut ag_context, fx: &Fx, env: &Env, a: Args) -> ag_status {
    let t = match a.handle {
        0 => fx.w,
        1 => fx.b,
        2 => fx.x,
        3 => fx.h,
        4 => fx.stale,
        5 => env.foreign.w,
        6 => zero(),
        8 => fx.col,
        _ => ag_tensor {
            index: 77,
            context: fx.w.context,
            generation: 99,
        },
    };
    // The second operand: the row beside the column (past the cap), else h.
    let u = if a.handle == 8 { fx.row } else { fx.h };
    let n = a.n;
    let mut f = [0.5f32; BUF];
    let shape = [4usize, 3, 1, 1, 1, 1, 1, 1];
    let ids = [1i32; BUF];
    let mut bytes = [0u8; BUF];
    let mut out = zero();
    let mut sz = [0usize; 8];
    let mut one = 0usize;
    let mut v = 0f32;
    let mut stats = arenagrad::MemoryStats::default();
    let p = |x: *const f32| if a.null { null() } else { x };
    let pm = |x: *mut f32| if a.null { null_mut() } else { x };
    let o = if a.null {
        null_mut()
    } else {
        &mut out as *mut _
    };
    let fl = if a.null { f32::NAN } else { 1e-3 };
    let path = CString::new(
        env.dir
            .join(if a.null { "missing/x.ckpt" } else { "x.ckpt" })
            .to_str()
            .unwrap(),
    )
    .unwrap();
    let pp = if n == 0 { null() } else { path.as_ptr() };
    let ub = if a.null {
        null_mut()
    } else {
        bytes.as_mut_ptr()
    };
    let ul = if a.null {
        null_mut()
    } else {
        &mut one as *mut _
    };
    let data = if a.null { null() } else { env.ckpt.as_ptr() };
    let dlen = if n == usize::MAX {
        n
    } else {
        n.min(env.ckpt.len())
    };
    // One arm per row of tests/common/c_functions.rs whose `contract:`
    // cell is `call(...)`: a closure over the arguments above, run once.
    macro_rules! c_functions {
        ($( $(#[$attr:meta])* $name:ident {
            fuzz: $fuzz:ident $(($fuzz_why:literal))? $(=> $fuzz_arm:ident)?,
            null: $null:ident($($null_cell:tt)*),
            contract: $contract:ident($($contract_cell:tt)*) $(, $($more_cells:tt)*)?
        })*) => {
            |which: &str| -> Option<ag_status> {
                $( $(#[$attr])* contract_call!(which, $name, $contract($($contract_cell)*)); )*
                None
            }
        };
    }
    macro_rules! contract_call {
        ($which:ident, $name:ident, call($call:expr)) => {
            if $which == stringify!($name) {
                return Some($call);
            }
        };
        ($which:ident, $name:ident, none($why:literal)) => {};
    }
    let mut dispatch = include!("common/c_functions.rs");
    dispatch(name).unwrap_or_else(|| {
        panic!(
            "no contract call for {name}: give its row in tests/common/c_functions.rs \
             a contract: call(...) cell"
        )
    })
}

/// A step handle of the kind `a.handle` picks: another context's, an
/// all-zero one, one with a past generation (freed), or a forged one.
fn step_arg(fx: &Fx, env: &Env, a: Args) -> ag_step {
    let id = fx.w.context;
    match a.handle {
        5 => ag_step {
            index: 0,
            context: env.foreign.w.context,
            generation: 1,
        },
        6 => ag_step::default(),
        4 => ag_step {
            index: 0,
            context: id,
            generation: 1,
        },
        _ => ag_step {
            index: 77,
            context: id,
            generation: 99,
        },
    }
}

fn name_of(st: ag_status) -> String {
    if st == AG_STATUS_OK {
        return "OK".into();
    }
    status_names()
        .get(&st)
        .cloned()
        .unwrap_or_else(|| format!("unknown status {st}"))
}

/// Functions that do not take a context first (or return no status) have
/// their own tests below or elsewhere.
fn catalogue_functions(docs: &BTreeMap<String, Doc>) -> Vec<String> {
    docs.iter()
        .filter(|(_, d)| d.takes_ctx)
        .map(|(n, _)| n.clone())
        .collect()
}

/// Each function taking a context has a contract call in the one table of
/// C functions, and a row without one takes no context; `call` is generated
/// from those rows, so this names the function whose cell is missing.
#[test]
fn every_context_function_has_a_contract_call() {
    let d = docs();
    let mut problems = Vec::new();
    for (name, doc) in &d {
        let rows = rows_named(name);
        let [row] = rows.as_slice() else {
            problems.push(format!(
                "{name}: {} rows in tests/common/c_functions.rs, want 1",
                rows.len()
            ));
            continue;
        };
        match (doc.takes_ctx, row.no_contract_call) {
            (true, Some(why)) => problems.push(format!(
                "{name} takes a context but its contract: cell is none({why:?}): \
                 give it a call(...) in tests/common/c_functions.rs"
            )),
            (false, None) => problems.push(format!(
                "{name} takes no context first: its contract: cell must be none(...)"
            )),
            _ => {}
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        d.values().filter(|doc| doc.takes_ctx).count() >= 100,
        "too few context functions parsed"
    );
}

#[test]
fn every_status_function_documents_its_errors() {
    let d = docs();
    assert!(d.len() >= 45, "only {} functions parsed", d.len());
    for name in [
        "ag_context_new",
        "ag_context_free",
        "ag_add",
        "ag_checkpoint_load",
    ] {
        assert!(d.contains_key(name), "{name} not parsed");
    }
}

/// The bad-input catalogue over every function with a context: each call
/// on a fresh context, each status checked against the header. Also
/// records which documented statuses were seen, for the coverage test.
fn run_catalogue() -> BTreeMap<String, BTreeSet<String>> {
    let docs = docs();
    let env = Env::new();
    let mut seen: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut undocumented = Vec::new();
    for name in catalogue_functions(&docs) {
        let doc = &docs[&name];
        for handle in 0..HANDLES {
            for null in [false, true] {
                for (n, state) in LENGTHS
                    .iter()
                    .flat_map(|&n| (0..STATES).map(move |s| (n, s)))
                {
                    let fx = Fx::new();
                    prepare(&fx, state);
                    let a = Args { handle, null, n };
                    let st = call(&name, fx.ctx, &fx, &env, a);
                    let s = name_of(st);
                    if !doc.allows(&s) {
                        undocumented.push(format!(
                            "{name} {a:?} state {state} -> {s}: {}",
                            last_error(fx.ctx)
                        ));
                    }
                    seen.entry(name.clone()).or_default().insert(s);
                }
            }
        }
    }
    assert!(
        undocumented.is_empty(),
        "statuses the header does not document:\n{}",
        undocumented.join("\n")
    );
    seen
}

fn last_error(ctx: *const ag_context) -> String {
    unsafe { CStr::from_ptr(ag_context_last_error(ctx)) }
        .to_string_lossy()
        .into_owned()
}

#[test]
fn no_function_returns_an_undocumented_status() {
    run_catalogue();
}

/// NULL, freed and poisoned contexts, for every function taking one.
#[test]
fn context_statuses_for_every_function() {
    let docs = docs();
    let env = Env::new();
    let fx = Fx::new();
    let a = Args {
        handle: 0,
        null: false,
        n: 1,
    };
    let mut dead = null_mut();
    ok(ag_context_new(&mut dead));
    let copy = dead;
    ok(ag_context_free(&mut dead));
    let mut poisoned = null_mut();
    ok(ag_context_new(&mut poisoned));
    assert_eq!(ag_test_panic(poisoned), AG_STATUS_PANIC);
    for name in catalogue_functions(&docs) {
        assert_eq!(
            call(&name, null_mut(), &fx, &env, a),
            AG_STATUS_NULL_ARGUMENT,
            "{name}(NULL)"
        );
        assert_eq!(
            call(&name, copy, &fx, &env, a),
            AG_STATUS_INVALID_CONTEXT,
            "{name}(freed)"
        );
        assert_eq!(
            call(&name, poisoned, &fx, &env, a),
            AG_STATUS_POISONED,
            "{name}(poisoned)"
        );
    }
    ok(ag_context_free(&mut poisoned));
}

// ---- the contract fixes, provoked one by one --------------------------------------

fn expect(docs: &BTreeMap<String, Doc>, func: &str, st: ag_status, want: &str) {
    assert_eq!(name_of(st), want, "{func}");
    assert!(
        docs[func].allows(want),
        "{func} returns {want} but does not document it"
    );
}

/// A checkpoint saved without an optimizer does not load into a context
/// with one (its moments and step count would be kept beside the new
/// weights); the reverse was already refused; loading it before the
/// optimizer exists works.
#[test]
fn checkpoint_without_optimizer_needs_a_context_without_one() {
    let docs = docs();
    let env = Env::new();
    let plain = Fx::new();
    let path = CString::new(env.dir.join("plain.ckpt").to_str().unwrap()).unwrap();
    ok(ag_checkpoint_save(plain.ctx, path.as_ptr(), null(), 0));
    let with_opt = Fx::new();
    ok(ag_optimizer_adamw(
        with_opt.ctx,
        1e-3,
        0.9,
        0.999,
        1e-8,
        0.0,
    ));
    let mut n = 0usize;
    let st = ag_checkpoint_load(with_opt.ctx, path.as_ptr(), null_mut(), 0, &mut n);
    expect(&docs, "ag_checkpoint_load", st, "CHECKPOINT_MISMATCH");
    assert!(
        last_error(with_opt.ctx).contains("optimizer"),
        "{}",
        last_error(with_opt.ctx)
    );
    let st = ag_checkpoint_peek(with_opt.ctx, path.as_ptr(), null_mut(), 0, &mut n);
    expect(&docs, "ag_checkpoint_peek", st, "CHECKPOINT_MISMATCH");
    let fresh = Fx::new();
    ok(ag_checkpoint_load(
        fresh.ctx,
        path.as_ptr(),
        null_mut(),
        0,
        &mut n,
    ));
    ok(ag_optimizer_sgd(fresh.ctx, 1e-3, 0.0, 0.0));
}

/// Parameter names clash (given or automatic) with INVALID_ARGUMENT; a
/// safetensors load, of one file or of a sharded checkpoint's index, refuses
/// a damaged file (CHECKPOINT_CORRUPT), another model's file
/// (CHECKPOINT_MISMATCH) and an empty path (INVALID_ARGUMENT).
#[test]
fn parameter_name_and_safetensors_statuses() {
    let docs = docs();
    let env = Env::new();
    let mut c = null_mut();
    ok(ag_context_new(&mut c));
    let mut t = zero();
    ok(ag_param_new_named(
        c,
        c"param.1".as_ptr(),
        [2usize].as_ptr(),
        1,
        null(),
        &mut t,
    ));
    let st = ag_param_new(c, [2usize].as_ptr(), 1, null(), &mut t);
    expect(&docs, "ag_param_new", st, "INVALID_ARGUMENT");
    let st = ag_param_new_named(c, c"param.1".as_ptr(), [2usize].as_ptr(), 1, null(), &mut t);
    expect(&docs, "ag_param_new_named", st, "INVALID_ARGUMENT");
    let path = env.dir.join("m.safetensors");
    let cpath = CString::new(path.to_str().unwrap()).unwrap();
    ok(ag_safetensors_save(c, cpath.as_ptr()));
    let st = ag_safetensors_save(c, c"".as_ptr());
    expect(&docs, "ag_safetensors_save", st, "INVALID_ARGUMENT");
    let st = ag_safetensors_load(c, c"".as_ptr());
    expect(&docs, "ag_safetensors_load", st, "INVALID_ARGUMENT");
    let fx = Fx::new(); // param.0 [4, 3], param.1 [3]
    let st = ag_safetensors_load(fx.ctx, cpath.as_ptr());
    expect(&docs, "ag_safetensors_load", st, "CHECKPOINT_MISMATCH");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
    let st = ag_safetensors_load(c, cpath.as_ptr());
    expect(&docs, "ag_safetensors_load", st, "CHECKPOINT_CORRUPT");
    // A sharded checkpoint's index: an empty path, a shard damaged (the
    // file above), another model's tensors.
    std::fs::write(&path, &bytes).unwrap();
    let index = env.dir.join("model.safetensors.index.json");
    std::fs::write(&index, r#"{"weight_map": {"param.1": "m.safetensors"}}"#).unwrap();
    let cindex = CString::new(index.to_str().unwrap()).unwrap();
    ok(ag_safetensors_load_index(c, cindex.as_ptr()));
    let st = ag_safetensors_load_index(c, c"".as_ptr());
    expect(&docs, "ag_safetensors_load_index", st, "INVALID_ARGUMENT");
    let st = ag_safetensors_load_index(fx.ctx, cindex.as_ptr());
    expect(
        &docs,
        "ag_safetensors_load_index",
        st,
        "CHECKPOINT_MISMATCH",
    );
    std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
    let st = ag_safetensors_load_index(c, cindex.as_ptr());
    expect(&docs, "ag_safetensors_load_index", st, "CHECKPOINT_CORRUPT");
    ok(ag_context_free(&mut c));
}

/// d(loss)/d(t) of an activation the loss does not depend on is zero, as
/// for an unused parameter; before backward, and for constants, there is
/// no gradient (SEQUENCE).
#[test]
fn read_grad_of_an_activation_outside_the_loss() {
    let docs = docs();
    let fx = Fx::new();
    let c = fx.ctx;
    let mut other = zero();
    ok(ag_relu(c, fx.h, &mut other)); // depends on w, not used by the loss
    let mut kept = zero();
    ok(ag_relu(c, fx.h, &mut kept)); // not retained: its gradient is not kept
    let mut g = [7.0f32; 6];
    let st = ag_tensor_read_grad(c, other, g.as_mut_ptr(), 6);
    expect(&docs, "ag_tensor_read_grad", st, "SEQUENCE");
    ok(ag_tensor_retain_grad(c, other));
    ok(ag_tensor_retain_grad(c, fx.h));
    let mut loss = zero();
    ok(ag_mean(c, fx.h, &mut loss));
    ok(ag_backward(c, loss));
    ok(ag_tensor_read_grad(c, other, g.as_mut_ptr(), 6));
    assert_eq!(g, [0.0; 6]);
    ok(ag_tensor_read_grad(c, fx.h, g.as_mut_ptr(), 6));
    assert!(g.iter().all(|&v| (v - 1.0 / 6.0).abs() < 1e-6), "{g:?}");
    let st = ag_tensor_read_grad(c, kept, g.as_mut_ptr(), 6);
    expect(&docs, "ag_tensor_read_grad", st, "SEQUENCE");
    let st = ag_tensor_read_grad(c, fx.x, g.as_mut_ptr(), 8);
    expect(&docs, "ag_tensor_read_grad", st, "SEQUENCE");
}

/// A length no buffer can have is a wrong length: INVALID_ARGUMENT, as the
/// header says for every length, never TOO_LARGE.
#[test]
fn impossible_lengths_are_invalid_arguments() {
    let docs = docs();
    let fx = Fx::new();
    let c = fx.ctx;
    let mut f = [0f32; 4];
    for (func, st) in [
        (
            "ag_tensor_read",
            ag_tensor_read(c, fx.h, f.as_mut_ptr(), usize::MAX),
        ),
        (
            "ag_tensor_read_grad",
            ag_tensor_read_grad(c, fx.w, f.as_mut_ptr(), usize::MAX),
        ),
        (
            "ag_param_write",
            ag_param_write(c, fx.w, f.as_ptr(), usize::MAX),
        ),
        ("ag_param_write", ag_param_write(c, fx.b, f.as_ptr(), 4)),
        ("ag_checkpoint_save", {
            let p = CString::new("/tmp/never-written.ckpt").unwrap();
            ag_checkpoint_save(c, p.as_ptr(), [0u8; 4].as_ptr(), usize::MAX)
        }),
        ("ag_checkpoint_save", {
            let p = CString::new("/tmp/never-written.ckpt").unwrap();
            let big = vec![0u8; AG_MAX_USER_BYTES + 1];
            ag_checkpoint_save(c, p.as_ptr(), big.as_ptr(), big.len())
        }),
        (
            "ag_embedding",
            ag_embedding(c, fx.w, [0i32].as_ptr(), usize::MAX, &mut zero()),
        ),
    ] {
        expect(&docs, func, st, "INVALID_ARGUMENT");
    }
    assert!(!std::path::Path::new("/tmp/never-written.ckpt").exists());
}

/// Saving through a symbolic link replaces the file it points to (through
/// a chain of links), keeps the links, and leaves no temporary file.
#[test]
fn checkpoint_save_follows_symbolic_links() {
    let env = Env::new();
    let fx = Fx::new();
    let dir = env.dir.join("links");
    let real_dir = dir.join("real");
    std::fs::create_dir_all(&real_dir).unwrap();
    let target = real_dir.join("model.ckpt");
    std::fs::write(&target, b"old").unwrap();
    let link1 = dir.join("latest.ckpt");
    let link2 = dir.join("alias.ckpt");
    std::os::unix::fs::symlink("real/model.ckpt", &link1).unwrap();
    std::os::unix::fs::symlink(&link1, &link2).unwrap();
    let p = CString::new(link2.to_str().unwrap()).unwrap();
    ok(ag_checkpoint_save(fx.ctx, p.as_ptr(), b"hi".as_ptr(), 2));
    assert!(
        std::fs::symlink_metadata(&link1)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(
        std::fs::symlink_metadata(&link2)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let saved = std::fs::read(&target).unwrap();
    assert_ne!(saved, b"old");
    let mut n = 0usize;
    let mut u = [0u8; 4];
    ok(ag_checkpoint_load(
        fx.ctx,
        p.as_ptr(),
        u.as_mut_ptr(),
        4,
        &mut n,
    ));
    assert_eq!(&u[..n], b"hi");
    let mut names: Vec<_> = std::fs::read_dir(&real_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["model.ckpt"], "temporary file left behind");
    // A dangling link: the file is created where it points.
    let dangling = dir.join("next.ckpt");
    std::os::unix::fs::symlink("real/next-target.ckpt", &dangling).unwrap();
    let p = CString::new(dangling.to_str().unwrap()).unwrap();
    ok(ag_checkpoint_save(fx.ctx, p.as_ptr(), null(), 0));
    assert!(real_dir.join("next-target.ckpt").is_file());
    assert!(
        std::fs::symlink_metadata(&dangling)
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

/// A tensor of `shape` filled with `v`, in the fixture's iteration.
fn filled(fx: &Fx, shape: &[usize], v: f32) -> ag_tensor {
    let data = vec![v; shape.iter().product()];
    let mut t = zero();
    ok(ag_tensor_new(
        fx.ctx,
        shape.as_ptr(),
        shape.len(),
        data.as_ptr(),
        &mut t,
    ));
    t
}

fn reshaped(fx: &Fx, t: ag_tensor, shape: &[usize]) -> ag_tensor {
    let mut out = zero();
    ok(ag_reshape(fx.ctx, t, shape.as_ptr(), shape.len(), &mut out));
    out
}

/// The statuses the catalogue's uniform arguments cannot reach, each
/// provoked by a call made for it (on a fresh fixture unless it needs the
/// previous call's state) and checked against what it should return and
/// against the header. Returns (function, status) for every case.
fn targeted_cases(env: &Env) -> Vec<(&'static str, String)> {
    let docs = docs();
    let mut seen = Vec::new();
    let mut check = |func: &'static str, st: ag_status, want: &str, ctx: *mut ag_context| {
        assert_eq!(name_of(st), want, "{func}: {}", last_error(ctx));
        assert!(
            docs[func].allows(want),
            "{func} returns {want} but does not document it"
        );
        seen.push((func, want.to_string()));
    };
    let mut out = zero();
    let mut n = 0usize;
    let big = [1usize << 16, 1 << 16];

    // Shapes: n_head not dividing C, causal softmax over Tq > Tk or one
    // axis, products and views past 2^31 - 1 elements.
    let fx = Fx::new();
    let c = fx.ctx;
    let qkv = filled(&fx, &[1, 2, 6], 0.1);
    let st = ag_attention(c, qkv, 3, &mut out);
    check("ag_attention", st, "INVALID_ARGUMENT", c);
    let st = ag_attention(c, qkv, 0, &mut out);
    check("ag_attention", st, "INVALID_ARGUMENT", c);
    let tall = filled(&fx, &[3, 2], 0.5);
    let st = ag_softmax(c, tall, true, 1.0, &mut out);
    check("ag_softmax", st, "SHAPE_MISMATCH", c);
    let st = ag_softmax(c, fx.b, true, 1.0, &mut out);
    check("ag_softmax", st, "SHAPE_MISMATCH", c);
    let st = ag_linear(c, fx.col, fx.row, null(), &mut out);
    check("ag_linear", st, "TOO_LARGE", c);
    let (col3, row3) = (
        reshaped(&fx, fx.col, &[1, 1 << 16, 1]),
        reshaped(&fx, fx.row, &[1, 1, 1 << 16]),
    );
    let st = ag_bmm(c, col3, row3, false, false, &mut out);
    check("ag_bmm", st, "TOO_LARGE", c);
    let st = ag_reshape(c, fx.h, [1usize << 31, 2].as_ptr(), 2, &mut out);
    check("ag_reshape", st, "TOO_LARGE", c);
    let st = ag_tensor_new(c, big.as_ptr(), 2, [0f32; 4].as_ptr(), &mut out);
    check("ag_tensor_new", st, "TOO_LARGE", c);

    // The arena cap: forward ops and backward's activation gradients.
    let fx = Fx::new();
    let c = fx.ctx;
    let qkv = filled(&fx, &[1, 2, 6], 0.1);
    let (a3, b3) = (
        reshaped(&fx, fx.x, &[1, 2, 4]),
        reshaped(&fx, fx.w, &[1, 4, 3]),
    );
    let heads = reshaped(&fx, fx.x, &[1, 1, 2, 4]);
    let square = filled(&fx, &[2, 2], 0.5);
    let column = filled(&fx, &[2], 0.5);
    let pairs = filled(&fx, &[3], 0.5);
    let single = filled(&fx, &[1], 0.5);
    let mut loss = zero();
    ok(ag_mean(c, fx.h, &mut loss));
    ok(ag_set_arena_limit(c, 1));
    let st = ag_rope(c, heads, 10000.0, 0, &mut out);
    check("ag_rope", st, "OUT_OF_MEMORY", c);
    let st = ag_attention(c, qkv, 1, &mut out);
    check("ag_attention", st, "OUT_OF_MEMORY", c);
    let st = ag_cholesky(c, square, &mut out);
    check("ag_cholesky", st, "OUT_OF_MEMORY", c);
    let st = ag_log_det_spd(c, square, &mut out);
    check("ag_log_det_spd", st, "OUT_OF_MEMORY", c);
    let st = ag_solve_lower(c, square, column, &mut out);
    check("ag_solve_lower", st, "OUT_OF_MEMORY", c);
    let st = ag_linear_recurrence(c, column, column, &mut out);
    check("ag_linear_recurrence", st, "OUT_OF_MEMORY", c);
    let mut jac = zero();
    // Bounds are checked before anything is allocated.
    let st = ag_constrain_lower(c, square, f32::NAN, &mut out, &mut jac);
    check("ag_constrain_lower", st, "INVALID_ARGUMENT", c);
    let st = ag_constrain_upper(c, square, f32::INFINITY, &mut out, &mut jac);
    check("ag_constrain_upper", st, "INVALID_ARGUMENT", c);
    let st = ag_constrain_interval(c, square, 1.0, 1.0, &mut out, &mut jac);
    check("ag_constrain_interval", st, "INVALID_ARGUMENT", c);
    let st = ag_constrain_lower(c, square, 0.0, &mut out, &mut jac);
    check("ag_constrain_lower", st, "OUT_OF_MEMORY", c);
    let st = ag_constrain_upper(c, square, 0.0, &mut out, &mut jac);
    check("ag_constrain_upper", st, "OUT_OF_MEMORY", c);
    let st = ag_constrain_interval(c, square, 0.0, 1.0, &mut out, &mut jac);
    check("ag_constrain_interval", st, "OUT_OF_MEMORY", c);
    // The shape is checked before anything is allocated: 2 coordinates
    // are no K (K - 1) / 2.
    let st = ag_constrain_cholesky_corr(c, column, &mut out, &mut jac);
    check("ag_constrain_cholesky_corr", st, "SHAPE_MISMATCH", c);
    let st = ag_constrain_cholesky_corr(c, pairs, &mut out, &mut jac);
    check("ag_constrain_cholesky_corr", st, "OUT_OF_MEMORY", c);
    let st = ag_normal_id_glm_lpdf(c, column, square, false, single, column, single, &mut out);
    check("ag_normal_id_glm_lpdf", st, "OUT_OF_MEMORY", c);
    let st = ag_bernoulli_logit_glm_lpmf(c, column, square, false, single, column, &mut out);
    check("ag_bernoulli_logit_glm_lpmf", st, "OUT_OF_MEMORY", c);
    // eta is checked before anything is allocated.
    let st = ag_lkj_corr_cholesky_lpdf(c, square, 0.0, &mut out);
    check("ag_lkj_corr_cholesky_lpdf", st, "INVALID_ARGUMENT", c);
    let st = ag_lkj_corr_cholesky_lpdf(c, square, 2.0, &mut out);
    check("ag_lkj_corr_cholesky_lpdf", st, "OUT_OF_MEMORY", c);
    let st = ag_normal_lpdf(c, column, single, column, &mut out);
    check("ag_normal_lpdf", st, "OUT_OF_MEMORY", c);
    let st = ag_attention_gqa(c, heads, heads, heads, &mut out);
    check("ag_attention_gqa", st, "OUT_OF_MEMORY", c);
    let st = ag_bmm(c, a3, b3, false, false, &mut out);
    check("ag_bmm", st, "OUT_OF_MEMORY", c);
    let st = ag_backward(c, loss);
    check("ag_backward", st, "OUT_OF_MEMORY", c);

    // A segment copies its output out of the scratch region: not under a
    // cap that leaves no room.
    let fx = Fx::new();
    let c = fx.ctx;
    ok(ag_set_recompute(c, AG_RECOMPUTE_ALL));
    ok(ag_segment_begin(c));
    let st = ag_segment_begin(c);
    check("ag_segment_begin", st, "SEQUENCE", c);
    let mut y = zero();
    ok(ag_tanh(c, fx.h, &mut y));
    ok(ag_set_arena_limit(c, 1));
    let st = ag_segment_end(c, y);
    check("ag_segment_end", st, "OUT_OF_MEMORY", c);
    ok(ag_set_arena_limit(c, 0));
    ok(ag_segment_end(c, y));

    // Convolution and pooling: bad configurations on valid shapes, wrong
    // shapes, and the arena cap.
    let fx = Fx::new();
    let c = fx.ctx;
    let img = filled(&fx, &[1, 2, 5, 5], 0.5);
    let seq = filled(&fx, &[1, 2, 5], 0.5);
    let w4 = filled(&fx, &[3, 2, 3, 3], 0.1);
    let w3 = filled(&fx, &[3, 2, 3], 0.1);
    let conv2 = |x, w, s: i32, g: i32, o: &mut ag_tensor| {
        ag_conv2d(c, x, w, null(), s, s, 0, 0, 1, 1, g, o)
    };
    let conv1 = |x, w, s: i32, g: i32, o: &mut ag_tensor| ag_conv1d(c, x, w, null(), s, 0, 1, g, o);
    check(
        "ag_conv2d",
        conv2(img, w4, 0, 1, &mut out),
        "INVALID_ARGUMENT",
        c,
    );
    check(
        "ag_conv2d",
        conv2(img, w4, 1, 2, &mut out),
        "SHAPE_MISMATCH",
        c,
    );
    check(
        "ag_conv1d",
        conv1(seq, w3, -1, 1, &mut out),
        "INVALID_ARGUMENT",
        c,
    );
    check(
        "ag_conv1d",
        conv1(img, w4, 1, 1, &mut out),
        "SHAPE_MISMATCH",
        c,
    );
    for (s, p, want) in [(0, 0, "INVALID_ARGUMENT"), (1, 2, "INVALID_ARGUMENT")] {
        let st = ag_max_pool2d(c, img, 3, 3, s, s, p, p, false, &mut out);
        check("ag_max_pool2d", st, want, c);
        let st = ag_avg_pool2d(c, img, 3, 3, s, s, p, p, false, true, &mut out);
        check("ag_avg_pool2d", st, want, c);
    }
    let st = ag_max_pool2d(c, seq, 2, 2, 1, 1, 0, 0, false, &mut out);
    check("ag_max_pool2d", st, "SHAPE_MISMATCH", c);
    let st = ag_avg_pool2d(c, img, 6, 6, 1, 1, 0, 0, false, true, &mut out);
    check("ag_avg_pool2d", st, "SHAPE_MISMATCH", c);
    check(
        "ag_global_avg_pool2d",
        ag_global_avg_pool2d(c, seq, &mut out),
        "SHAPE_MISMATCH",
        c,
    );
    ok(ag_set_arena_limit(c, 1));
    check(
        "ag_conv2d",
        conv2(img, w4, 1, 1, &mut out),
        "OUT_OF_MEMORY",
        c,
    );
    check(
        "ag_conv2d_relu",
        ag_conv2d_relu(c, img, w4, null(), 1, 1, 0, 0, 1, 1, 1, &mut out),
        "OUT_OF_MEMORY",
        c,
    );
    check(
        "ag_conv1d",
        conv1(seq, w3, 1, 1, &mut out),
        "OUT_OF_MEMORY",
        c,
    );
    let st = ag_max_pool2d(c, img, 2, 2, 2, 2, 0, 0, false, &mut out);
    check("ag_max_pool2d", st, "OUT_OF_MEMORY", c);
    let st = ag_avg_pool2d(c, img, 2, 2, 2, 2, 0, 0, false, true, &mut out);
    check("ag_avg_pool2d", st, "OUT_OF_MEMORY", c);
    check(
        "ag_global_avg_pool2d",
        ag_global_avg_pool2d(c, img, &mut out),
        "OUT_OF_MEMORY",
        c,
    );

    // Backward twice in one iteration; the gradient of a constant.
    let fx = Fx::new();
    let c = fx.ctx;
    ok(ag_mean(c, fx.h, &mut loss));
    ok(ag_backward(c, loss));
    let st = ag_backward(c, loss);
    check("ag_backward", st, "SEQUENCE", c);
    let mut g = [0f32; 8];
    let st = ag_tensor_read_grad(c, fx.x, g.as_mut_ptr(), 8);
    check("ag_tensor_read_grad", st, "SEQUENCE", c);

    // Parameters past the element cap, or whose buffer cannot be had.
    let mut ctx = null_mut();
    ok(ag_context_new(&mut ctx));
    let st = ag_param_new(ctx, big.as_ptr(), 2, null(), &mut out);
    check("ag_param_new", st, "TOO_LARGE", ctx);
    let st = ag_param_new_named(ctx, c"big".as_ptr(), big.as_ptr(), 2, null(), &mut out);
    check("ag_param_new_named", st, "TOO_LARGE", ctx);
    ok(ag_param_new(ctx, [4usize].as_ptr(), 1, null(), &mut out));
    let st_path = CString::new(env.dir.join("targeted.st").to_str().unwrap()).unwrap();
    ok(ag_safetensors_save(ctx, st_path.as_ptr()));
    ok(ag_test_fail_allocation(ctx, 1, true, null_mut()));
    let st = ag_param_new(ctx, [4usize].as_ptr(), 1, null(), &mut out);
    check("ag_param_new", st, "ALLOCATION_FAILED", ctx);
    let st = ag_param_new_named(
        ctx,
        c"small".as_ptr(),
        [4usize].as_ptr(),
        1,
        null(),
        &mut out,
    );
    check("ag_param_new_named", st, "ALLOCATION_FAILED", ctx);
    let st = ag_safetensors_load(ctx, st_path.as_ptr());
    check("ag_safetensors_load", st, "ALLOCATION_FAILED", ctx);
    let st = ag_set_grad_ready_callback(ctx, Some(grad_ready_noop), null_mut(), 0);
    check("ag_set_grad_ready_callback", st, "ALLOCATION_FAILED", ctx);
    ok(ag_context_free(&mut ctx));

    // Checkpoints: a missing folder, an empty path, user bytes (the
    // foreign checkpoint carries one) that do not fit, a flipped byte, a
    // model of other shapes, another optimizer kind.
    let fx = Fx::new();
    let c = fx.ctx;
    let file = |name: &str| CString::new(env.dir.join(name).to_str().unwrap()).unwrap();
    let st = ag_checkpoint_save(c, file("no/such/folder.ckpt").as_ptr(), null(), 0);
    check("ag_checkpoint_save", st, "IO", c);
    let good = file("targeted_good.ckpt");
    std::fs::write(env.dir.join("targeted_good.ckpt"), &env.ckpt).unwrap();
    let empty = CString::new("").unwrap();
    let mut u = [0u8; 4];
    let st = ag_checkpoint_load(c, empty.as_ptr(), u.as_mut_ptr(), 4, &mut n);
    check("ag_checkpoint_load", st, "INVALID_ARGUMENT", c);
    let st = ag_checkpoint_peek(c, empty.as_ptr(), u.as_mut_ptr(), 4, &mut n);
    check("ag_checkpoint_peek", st, "INVALID_ARGUMENT", c);
    let st = ag_checkpoint_load(c, good.as_ptr(), u.as_mut_ptr(), 0, &mut n);
    check("ag_checkpoint_load", st, "INVALID_ARGUMENT", c);
    let st = ag_checkpoint_peek(c, good.as_ptr(), u.as_mut_ptr(), 0, &mut n);
    check("ag_checkpoint_peek", st, "INVALID_ARGUMENT", c);
    let mut flipped = env.ckpt.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x10;
    std::fs::write(env.dir.join("targeted_flipped.ckpt"), &flipped).unwrap();
    let bad = file("targeted_flipped.ckpt");
    let st = ag_checkpoint_load(c, bad.as_ptr(), u.as_mut_ptr(), 4, &mut n);
    check("ag_checkpoint_load", st, "CHECKPOINT_CORRUPT", c);
    let st = ag_checkpoint_peek(c, bad.as_ptr(), u.as_mut_ptr(), 4, &mut n);
    check("ag_checkpoint_peek", st, "CHECKPOINT_CORRUPT", c);
    let mut other = null_mut();
    ok(ag_context_new(&mut other));
    ok(ag_param_new(other, [5usize].as_ptr(), 1, null(), &mut out));
    let st = ag_checkpoint_load_bytes(
        other,
        env.ckpt.as_ptr(),
        env.ckpt.len(),
        u.as_mut_ptr(),
        4,
        &mut n,
    );
    check("ag_checkpoint_load_bytes", st, "CHECKPOINT_MISMATCH", other);
    let st = ag_checkpoint_peek_bytes(
        other,
        env.ckpt.as_ptr(),
        env.ckpt.len(),
        u.as_mut_ptr(),
        4,
        &mut n,
    );
    check("ag_checkpoint_peek_bytes", st, "CHECKPOINT_MISMATCH", other);
    ok(ag_context_free(&mut other));
    let st = ag_checkpoint_peek_bytes(
        c,
        flipped.as_ptr(),
        flipped.len(),
        u.as_mut_ptr(),
        4,
        &mut n,
    );
    check("ag_checkpoint_peek_bytes", st, "CHECKPOINT_CORRUPT", c);
    let st = ag_checkpoint_peek_bytes(
        c,
        env.ckpt.as_ptr(),
        env.ckpt.len(),
        u.as_mut_ptr(),
        0,
        &mut n,
    );
    check("ag_checkpoint_peek_bytes", st, "INVALID_ARGUMENT", c);

    // The gradient block: none before the first parameter; a NULL array
    // with the right length (the length is checked first).
    let mut bare = null_mut();
    ok(ag_context_new(&mut bare));
    let (mut gp, mut gl) = (null_mut::<f32>(), 0usize);
    let st = ag_grads_buffer(bare, &mut gp, &mut gl);
    check("ag_grads_buffer", st, "SEQUENCE", bare);
    assert!(
        gp.is_null() && gl == 0,
        "a refused call wrote its out-params"
    );
    ok(ag_grads_copy_out(bare, null_mut(), 0));
    ok(ag_context_free(&mut bare));
    let st = ag_grads_copy_out(c, null_mut(), 15);
    check("ag_grads_copy_out", st, "NULL_ARGUMENT", c);
    let st = ag_grads_copy_in(c, null(), 15);
    check("ag_grads_copy_in", st, "NULL_ARGUMENT", c);
    ok(ag_optimizer_adamw(c, 1e-3, 0.9, 0.999, 1e-8, 0.0));
    let st = ag_checkpoint_load(c, good.as_ptr(), u.as_mut_ptr(), 4, &mut n);
    check("ag_checkpoint_load", st, "CHECKPOINT_MISMATCH", c);
    let st = ag_checkpoint_peek(c, good.as_ptr(), u.as_mut_ptr(), 4, &mut n);
    check("ag_checkpoint_peek", st, "CHECKPOINT_MISMATCH", c);

    // Sharded optimizer state: ranges past the parameters, a shard after
    // the optimizer, NULL arrays, a sharded optimizer's checkpoint.
    let st = ag_optimizer_shard(c, 0, 1);
    check("ag_optimizer_shard", st, "SEQUENCE", c);
    let mut sh = null_mut();
    ok(ag_context_new(&mut sh));
    ok(ag_param_new(sh, [4usize].as_ptr(), 1, null(), &mut out));
    let st = ag_optimizer_shard(sh, 3, 2);
    check("ag_optimizer_shard", st, "INVALID_ARGUMENT", sh);
    let mut four = [0f32; 4];
    let st = ag_params_copy_out(sh, 1, four.as_mut_ptr(), 4);
    check("ag_params_copy_out", st, "INVALID_ARGUMENT", sh);
    let st = ag_params_copy_in(sh, usize::MAX, four.as_ptr(), 2);
    check("ag_params_copy_in", st, "INVALID_ARGUMENT", sh);
    let st = ag_params_copy_out(sh, 0, null_mut(), 2);
    check("ag_params_copy_out", st, "NULL_ARGUMENT", sh);
    let st = ag_params_copy_in(sh, 0, null(), 2);
    check("ag_params_copy_in", st, "NULL_ARGUMENT", sh);
    ok(ag_optimizer_shard(sh, 0, 2));
    ok(ag_optimizer_adamw(sh, 1e-3, 0.9, 0.999, 1e-8, 0.0));
    let sharded = CString::new(env.dir.join("sharded.ckpt").to_str().unwrap()).unwrap();
    let st = ag_checkpoint_save(sh, sharded.as_ptr(), null(), 0);
    check("ag_checkpoint_save", st, "SEQUENCE", sh);
    // Moments: outside the shard, a third moment, NULL, no optimizer; a
    // gathered save with the wrong count or NULL moments.
    let st = ag_optimizer_state_copy_out(sh, 0, 1, four.as_mut_ptr(), 2);
    check("ag_optimizer_state_copy_out", st, "INVALID_ARGUMENT", sh);
    let st = ag_optimizer_state_copy_in(sh, 2, 0, four.as_ptr(), 1);
    check("ag_optimizer_state_copy_in", st, "INVALID_ARGUMENT", sh);
    let st = ag_optimizer_state_copy_out(sh, 1, 0, null_mut(), 2);
    check("ag_optimizer_state_copy_out", st, "NULL_ARGUMENT", sh);
    let st = ag_optimizer_state_copy_in(sh, 1, 0, null(), 2);
    check("ag_optimizer_state_copy_in", st, "NULL_ARGUMENT", sh);
    let st = ag_checkpoint_save_gathered(sh, sharded.as_ptr(), null(), 0, four.as_ptr(), 4);
    check("ag_checkpoint_save_gathered", st, "INVALID_ARGUMENT", sh);
    let st = ag_checkpoint_save_gathered(sh, sharded.as_ptr(), null(), 0, null(), 8);
    check("ag_checkpoint_save_gathered", st, "NULL_ARGUMENT", sh);
    let st = ag_checkpoint_save_gathered(sh, null(), null(), 0, null(), 0);
    check("ag_checkpoint_save_gathered", st, "NULL_ARGUMENT", sh);
    let eight = [0.5f32; 8];
    ok(ag_checkpoint_save_gathered(
        sh,
        sharded.as_ptr(),
        null(),
        0,
        eight.as_ptr(),
        8,
    ));
    let missing = CString::new(env.dir.join("missing/g.ckpt").to_str().unwrap()).unwrap();
    let st = ag_checkpoint_save_gathered(sh, missing.as_ptr(), null(), 0, eight.as_ptr(), 8);
    check("ag_checkpoint_save_gathered", st, "IO", sh);
    let mut none = null_mut();
    ok(ag_context_new(&mut none));
    ok(ag_param_new(none, [4usize].as_ptr(), 1, null(), &mut out));
    let st = ag_optimizer_state_copy_out(none, 0, 0, four.as_mut_ptr(), 1);
    check("ag_optimizer_state_copy_out", st, "SEQUENCE", none);
    let st = ag_optimizer_state_copy_in(none, 0, 0, four.as_ptr(), 1);
    check("ag_optimizer_state_copy_in", st, "SEQUENCE", none);
    let st = ag_checkpoint_save_gathered(none, sharded.as_ptr(), null(), 0, four.as_ptr(), 1);
    check("ag_checkpoint_save_gathered", st, "INVALID_ARGUMENT", none);
    ok(ag_context_free(&mut none));
    ok(ag_context_free(&mut sh));
    // Capture and replay: the sequence, the dropout refusal, a failed
    // allocation of the step's records, and the arena cap.
    let fx = Fx::new();
    let c = fx.ctx;
    let capture = |dropout: bool| {
        ok(ag_capture_begin(c));
        let (mut x, mut y, mut l) = (zero(), zero(), zero());
        ok(ag_input_new(c, [3].as_ptr(), 1, &mut x));
        ok(ag_mul(c, x, fx.b, &mut y));
        if dropout {
            let y0 = y;
            ok(ag_dropout(c, y0, 0.5, 1, &mut y));
        }
        ok(ag_sum(c, y, &mut l));
        ok(ag_backward(c, l));
        (x, l)
    };
    let mut step = ag_step::default();
    let (_, l) = capture(false);
    let st = ag_capture_begin(c);
    check("ag_capture_begin", st, "SEQUENCE", c);
    let st = ag_replay(c, step);
    check("ag_replay", st, "INVALID_HANDLE", c);
    ok(ag_test_fail_allocation(c, 1, true, null_mut()));
    let st = ag_capture_end(c, l, &mut step);
    check("ag_capture_end", st, "ALLOCATION_FAILED", c);
    ok(ag_test_fail_allocation(c, 0, false, null_mut()));
    ok(ag_capture_end(c, l, &mut step));
    let st = ag_capture_end(c, l, &mut step);
    check("ag_capture_end", st, "SEQUENCE", c);
    let mut out = zero();
    let st = ag_input_new(c, [3].as_ptr(), 1, &mut out);
    check("ag_input_new", st, "SEQUENCE", c);
    // Any op: the captured step's graph cannot grow (the conventions).
    let st = ag_add(c, l, l, &mut out);
    check("ag_add", st, "SEQUENCE", c);
    let st = ag_tensor_new(c, [1].as_ptr(), 1, [1.0f32].as_ptr(), &mut out);
    check("ag_tensor_new", st, "SEQUENCE", c);
    // Another capture open: the first step waits.
    let (x2, l2) = capture(true);
    let st = ag_replay(c, step);
    check("ag_replay", st, "SEQUENCE", c);
    let mut s3 = ag_step::default();
    let st = ag_capture_end(c, l2, &mut s3);
    check("ag_capture_end", st, "INVALID_ARGUMENT", c);
    assert_eq!(s3, ag_step::default(), "a refused call wrote its out-param");
    let _ = x2;
    ok(ag_reset(c));
    // The cap below the step's bytes, then a parameter added since.
    ok(ag_set_arena_limit(c, 64));
    let st = ag_replay(c, step);
    check("ag_replay", st, "OUT_OF_MEMORY", c);
    ok(ag_set_arena_limit(c, 0));
    ok(ag_replay(c, step));
    let fx2 = Fx::new();
    let c2 = fx2.ctx;
    ok(ag_capture_begin(c2));
    let (mut xi, mut y, mut l) = (zero(), zero(), zero());
    ok(ag_input_new(c2, [3].as_ptr(), 1, &mut xi));
    ok(ag_mul(c2, xi, fx2.b, &mut y));
    ok(ag_sum(c2, y, &mut l));
    ok(ag_backward(c2, l));
    let mut s2 = ag_step::default();
    ok(ag_capture_end(c2, l, &mut s2));
    ok(ag_reset(c2));
    ok(ag_set_arena_limit(c2, 64));
    let st = ag_input_write(c2, xi, [1.0f32; 3].as_ptr(), 3);
    check("ag_input_write", st, "OUT_OF_MEMORY", c2);
    ok(ag_set_arena_limit(c2, 0));
    let mut pw = zero();
    ok(ag_param_new(c2, [2].as_ptr(), 1, null(), &mut pw));
    let st = ag_input_write(c2, xi, [1.0f32; 3].as_ptr(), 3);
    check("ag_input_write", st, "SEQUENCE", c2);
    let st = ag_replay(c2, s2);
    check("ag_replay", st, "SEQUENCE", c2);
    let st = ag_input_write_ids(c2, s2, 0, [0i32; 1].as_ptr(), 1);
    check("ag_input_write_ids", st, "SEQUENCE", c2);
    ok(ag_step_free(c2, &mut s2));
    assert_eq!(s2, ag_step::default(), "ag_step_free zeroes the handle");

    // Seeded dropout: a step's seed under the refusals of a replay, and an
    // eager op past the arena cap.
    let fx4 = Fx::new();
    let c4 = fx4.ctx;
    ok(ag_capture_begin(c4));
    let (mut sd, mut y, mut l) = (zero(), zero(), zero());
    ok(ag_input_new(c4, [4].as_ptr(), 1, &mut sd));
    ok(ag_seed_write(c4, sd, u64::MAX));
    ok(ag_dropout_seeded(c4, fx4.w, 0.5, sd, &mut y));
    ok(ag_sum(c4, y, &mut l));
    ok(ag_backward(c4, l));
    let mut s4 = ag_step::default();
    ok(ag_capture_end(c4, l, &mut s4));
    ok(ag_reset(c4));
    ok(ag_set_arena_limit(c4, 64));
    let st = ag_seed_write(c4, sd, 1);
    check("ag_seed_write", st, "OUT_OF_MEMORY", c4);
    ok(ag_set_arena_limit(c4, 0));
    ok(ag_seed_write(c4, sd, 2));
    ok(ag_replay(c4, s4));
    ok(ag_reset(c4));
    let mut pw = zero();
    ok(ag_param_new(c4, [2].as_ptr(), 1, null(), &mut pw));
    let st = ag_seed_write(c4, sd, 3);
    check("ag_seed_write", st, "SEQUENCE", c4);
    let mut se = zero();
    ok(ag_input_new(c4, [4].as_ptr(), 1, &mut se));
    ok(ag_seed_write(c4, se, 3));
    let mut col = zero();
    ok(ag_tensor_new(
        c4,
        [1 << 16].as_ptr(),
        1,
        vec![0.5f32; 1 << 16].as_ptr(),
        &mut col,
    ));
    let mut ms = arenagrad::MemoryStats::default();
    ok(ag_memory_stats(c4, &mut ms));
    ok(ag_set_arena_limit(c4, ms.arena_used_bytes as usize + 64));
    let st = ag_dropout_seeded(c4, col, 0.5, se, &mut out);
    check("ag_dropout_seeded", st, "OUT_OF_MEMORY", c4);
    ok(ag_set_arena_limit(c4, 0));
    // A computed tensor as the seed: not data.
    let mut sc = zero();
    ok(ag_scale(c4, se, 1.0, &mut sc));
    let st = ag_dropout_seeded(c4, col, 0.5, sc, &mut out);
    check("ag_dropout_seeded", st, "INVALID_ARGUMENT", c4);

    // Id buffers of a step: embedding ids and cross-entropy targets.
    let fx3 = Fx::new();
    let c3 = fx3.ctx;
    ok(ag_capture_begin(c3));
    let (mut e, mut lg) = (zero(), zero());
    ok(ag_embedding(c3, fx3.w, [0i32, 3].as_ptr(), 2, &mut e));
    ok(ag_cross_entropy(c3, e, [1i32, 2].as_ptr(), 2, &mut lg));
    ok(ag_backward(c3, lg));
    let mut s3 = ag_step::default();
    ok(ag_capture_end(c3, lg, &mut s3));
    ok(ag_input_write_ids(c3, s3, 0, [1i32, 2].as_ptr(), 2));
    let st = ag_input_write_ids(c3, s3, 0, [1i32, 4].as_ptr(), 2);
    check("ag_input_write_ids", st, "INDEX_OUT_OF_RANGE", c3);
    let st = ag_input_write_ids(c3, s3, 1, [1i32, 3].as_ptr(), 2);
    check("ag_input_write_ids", st, "INDEX_OUT_OF_RANGE", c3);
    let st = ag_input_write_ids(c3, s3, 2, [1i32, 2].as_ptr(), 2);
    check("ag_input_write_ids", st, "INVALID_ARGUMENT", c3);
    let st = ag_input_write_ids(c3, s3, 1, [1i32].as_ptr(), 1);
    check("ag_input_write_ids", st, "INVALID_ARGUMENT", c3);
    ok(ag_reset(c3));
    ok(ag_set_arena_limit(c3, 64));
    let st = ag_input_write_ids(c3, s3, 0, [1i32, 2].as_ptr(), 2);
    check("ag_input_write_ids", st, "OUT_OF_MEMORY", c3);
    ok(ag_set_arena_limit(c3, 0));
    seen
}

#[test]
fn targeted_cases_return_their_statuses() {
    targeted_cases(&Env::new());
}

/// Every status each function documents is returned by the catalogue or by
/// one of the targeted cases.
#[test]
fn every_documented_status_is_provoked() {
    let docs = docs();
    let mut seen = run_catalogue();
    // Reached, with the status asserted, by the named-parameter and
    // safetensors tests of this file.
    let targeted: &[(&str, &str)] = &[
        ("ag_param_new", "INVALID_ARGUMENT"),
        ("ag_param_new_named", "INVALID_ARGUMENT"),
        ("ag_safetensors_save", "INVALID_ARGUMENT"),
        ("ag_safetensors_load", "INVALID_ARGUMENT"),
        ("ag_safetensors_load", "CHECKPOINT_MISMATCH"),
        ("ag_safetensors_load", "CHECKPOINT_CORRUPT"),
        ("ag_safetensors_load_index", "INVALID_ARGUMENT"),
        ("ag_safetensors_load_index", "CHECKPOINT_MISMATCH"),
        ("ag_safetensors_load_index", "CHECKPOINT_CORRUPT"),
    ];
    for (f, s) in targeted {
        seen.entry(f.to_string()).or_default().insert(s.to_string());
    }
    let env = Env::new();
    for (f, st) in targeted_cases(&env) {
        seen.entry(f.to_string()).or_default().insert(st);
    }
    let mut missing = Vec::new();
    for (name, doc) in &docs {
        if !doc.takes_ctx {
            continue;
        }
        for s in &doc.errors {
            if !seen.get(name).is_some_and(|set| set.contains(s)) {
                missing.push(format!("{name}: {s}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "documented but never provoked: {missing:?}"
    );
}

/// Run as a child process by `caught_panics_are_silent_unless_asked`: one
/// caught panic through the C API.
#[test]
#[ignore = "run by caught_panics_are_silent_unless_asked"]
fn panic_child() {
    let mut c = null_mut();
    ok(ag_context_new(&mut c));
    assert_eq!(ag_test_panic(c), AG_STATUS_PANIC);
    assert!(
        last_error(c).contains("deliberate panic"),
        "{}",
        last_error(c)
    );
    ok(ag_context_free(&mut c));
}

/// A caught panic keeps its message for ag_context_last_error and prints
/// nothing, unless AG_PRINT_PANICS=1 asks for the usual Rust message.
#[test]
fn caught_panics_are_silent_unless_asked() {
    let run = |print: Option<&str>| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--ignored",
            "--exact",
            "panic_child",
            "--nocapture",
            "--test-threads=1",
        ]);
        cmd.env_remove("AG_PRINT_PANICS");
        if let Some(v) = print {
            cmd.env("AG_PRINT_PANICS", v);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let quiet = run(None);
    assert!(!quiet.contains("panicked"), "stderr: {quiet}");
    let quiet0 = run(Some("0"));
    assert!(!quiet0.contains("panicked"), "stderr: {quiet0}");
    let loud = run(Some("1"));
    assert!(
        loud.contains("panicked") && loud.contains("deliberate panic from ag_test_panic"),
        "stderr: {loud}"
    );
}
