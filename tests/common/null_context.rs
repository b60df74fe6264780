//! The NULL-context table: every exported function that takes a context,
//! called with a NULL one, generated from the `null:` column of the one
//! table of C functions (tests/common/c_functions.rs). `tests/ffi_contract.rs`
//! checks each call gives NULL_ARGUMENT; `tests/header_tables.rs` checks that
//! every function of include/arenagrad.h is called here or is in
//! [`without_a_null_context_status`].

#[path = "c_function_rows.rs"]
pub mod c_function_rows;

use arenagrad::MemoryStats;
use arenagrad::ffi::*;
use std::ffi::CString;
use std::ptr::{null, null_mut};

/// The functions of the table whose `null:` cell is `none`, and why: they
/// take no context, or give a NULL one a meaning of their own (checked by
/// [`check_functions_without_a_null_context_status`]).
pub fn without_a_null_context_status() -> Vec<(&'static str, &'static str)> {
    c_function_rows::c_functions()
        .into_iter()
        .filter_map(|r| Some((r.name, r.no_null_call?)))
        .collect()
}

/// Calls every function that takes a context with a NULL one, `p` and `q`
/// as tensor arguments; returns (function, status). Asserts that no
/// out-parameter was written.
#[allow(deprecated)] // also calls the deprecated aliases
#[allow(clippy::vec_init_then_push)] // see the comment in the macro
pub fn calls_with_a_null_context(p: ag_tensor, q: ag_tensor) -> Vec<(&'static str, ag_status)> {
    let n = null_mut::<ag_context>();
    let shape = [2usize, 2];
    let data = [1.0f32; 4];
    let ids = [0i32; 2];
    let sentinel = ag_tensor {
        index: 0xA5A5_A5A5,
        context: 0x5A5A_5A5A,
        generation: 0xDEAD_BEEF_F00D_CAFE,
    };
    let mut o = sentinel;
    let mut s = MemoryStats {
        resets: 77,
        ..Default::default()
    };
    let mut dims = [9usize; AG_MAX_DIMS];
    let (mut nd, mut numel, mut f, mut ulen) = (9usize, 9usize, 9.0f32, 9usize);
    let mut buf = [9.0f32; 4];
    let mut gptr = null_mut::<f32>();
    let mut user = [9u8; 4];
    let mut name = [9 as std::ffi::c_char; 8];
    let step_sentinel = ag_step {
        index: 7,
        context: 9,
        generation: 11,
    };
    let mut st = step_sentinel;
    let path = CString::new("/tmp/never-written.ckpt").unwrap();
    // One call per row of tests/common/c_functions.rs whose `null:` cell is
    // `call(...)`, in the table's order.
    macro_rules! c_functions {
        ($( $(#[$attr:meta])* $name:ident {
            fuzz: $fuzz:ident $(($fuzz_why:literal))? $(=> $fuzz_arm:ident)?,
            null: $null:ident($($null_cell:tt)*),
            contract: $contract:ident($($contract_cell:tt)*) $(, $($more_cells:tt)*)?
        })*) => {{
            // Pushed one by one: a row may carry #[cfg], which vec![] cannot.
            let mut calls: Vec<(&'static str, ag_status)> = Vec::new();
            $( $(#[$attr])* null_call!(calls, $name, $null($($null_cell)*)); )*
            calls
        }};
    }
    macro_rules! null_call {
        ($calls:ident, $name:ident, call($call:expr)) => {
            $calls.push((stringify!($name), $call))
        };
        ($calls:ident, $name:ident, none($why:literal)) => {};
    }
    let calls = include!("c_functions.rs");
    assert_eq!(o, sentinel);
    assert_eq!(st, step_sentinel);
    assert_eq!(s.resets, 77);
    assert_eq!(
        (dims, nd, numel, f, buf, user, ulen),
        ([9; AG_MAX_DIMS], 9, 9, 9.0, [9.0; 4], [9; 4], 9)
    );
    assert!(gptr.is_null());
    assert!(!std::path::Path::new("/tmp/never-written.ckpt").exists());
    calls
}

/// What the functions of [`without_a_null_context_status`] do with NULL.
pub fn check_functions_without_a_null_context_status() {
    assert!(!ag_status_str(AG_STATUS_NULL_ARGUMENT).is_null());
    assert!(!ag_version().is_null());
    assert_eq!(
        ag_version_number(),
        AG_VERSION_MAJOR * 10000 + AG_VERSION_MINOR * 100 + AG_VERSION_PATCH
    );
    assert_eq!(ag_context_new(null_mut()), AG_STATUS_NULL_ARGUMENT);
    assert_eq!(ag_context_free(null_mut()), AG_STATUS_OK);
    let mut none = null_mut::<ag_context>();
    assert_eq!(ag_context_free(&mut none), AG_STATUS_OK);
    assert!(super::ffi::last_error(null()).contains("NULL"));
}
