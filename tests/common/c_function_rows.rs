//! The rows of the one table of C functions (tests/common/c_functions.rs) as
//! data: which cells say `none`, and why. The tests that check a table kept
//! elsewhere (the header, tests/c/ops.def, the fuzz alphabet) against the one
//! table read it through [`c_functions`].
//!
//! Test crates declare this file with `#[path]` (it is not in common/mod.rs).
#![allow(dead_code)]

/// One row of the table.
#[derive(Clone, Copy, Debug)]
pub struct CFunction {
    pub name: &'static str,
    /// Why the function has no fuzz id (None: it has one).
    pub no_fuzz_id: Option<&'static str>,
    /// Why it is not called with a NULL context (None: it is).
    pub no_null_call: Option<&'static str>,
    /// Why it has no status-contract call (None: it has one).
    pub no_contract_call: Option<&'static str>,
}

/// Every row of the table, in its order (the test hooks only in a
/// `test-hooks` build).
#[allow(clippy::vec_init_then_push)] // see the comment in the macro
pub fn c_functions() -> Vec<CFunction> {
    macro_rules! c_functions {
        ($( $(#[$attr:meta])* $name:ident {
            fuzz: $fuzz:ident $(($fuzz_why:literal))?,
            null: $null:ident($($null_cell:tt)*),
            contract: $contract:ident($($contract_cell:tt)*) $(,)?
        })*) => {{
            // Pushed one by one: a row may carry #[cfg], which vec![] cannot.
            let mut rows = Vec::new();
            $(
                $(#[$attr])*
                rows.push(CFunction {
                    name: stringify!($name),
                    no_fuzz_id: why!($fuzz $(($fuzz_why))?),
                    no_null_call: why!($null($($null_cell)*)),
                    no_contract_call: why!($contract($($contract_cell)*)),
                });
            )*
            rows
        }};
    }
    /// The reason of a `none("...")` cell; None for an id or a `call(...)`.
    macro_rules! why {
        (none($why:literal)) => {
            Some($why)
        };
        ($($cell:tt)*) => {
            None
        };
    }
    include!("c_functions.rs")
}

/// The rows named `name` (a row given twice is a mistake the tests report).
pub fn rows_named(name: &str) -> Vec<CFunction> {
    c_functions()
        .into_iter()
        .filter(|r| r.name == name)
        .collect()
}
