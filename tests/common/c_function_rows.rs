//! The rows of the one table of C functions (tests/common/c_functions.rs) as
//! data: which cells say `none`, and why. The tests that check a table kept
//! elsewhere (the header, tests/c/ops.def, the fuzz alphabet) against the one
//! table read it through [`c_functions`]; tests/c/ops.def is generated from
//! it ([`ops_def`]).
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
    /// Its row of tests/c/ops.def: the macro (`AG_OP` or `AG_HANDLE_FN`)
    /// and its arguments after the name (None: it takes no tensor handle).
    pub c_row: Option<(&'static str, &'static str)>,
}

/// Every row of the table, in its order (the test hooks only in a
/// `test-hooks` build).
#[allow(clippy::vec_init_then_push)] // see the comment in the macro
pub fn c_functions() -> Vec<CFunction> {
    macro_rules! c_functions {
        ($( $(#[$attr:meta])* $name:ident {
            fuzz: $fuzz:ident $(($fuzz_why:literal))? $(=> $fuzz_arm:ident)?,
            null: $null:ident($($null_cell:tt)*),
            contract: $contract:ident($($contract_cell:tt)*)
            $(, c: $c_kind:ident($c_args:literal))? $(,)?
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
                    c_row: None $(.or(Some((stringify!($c_kind), $c_args))))?,
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

/// What tests/c/ops.def starts with: how to read its rows.
const OPS_DEF_PREAMBLE: &str = "\
/*
 * ops.def: every function of include/arenagrad.h that takes a tensor handle,
 * one row each. GENERATED from the `c:` cells of tests/common/c_functions.rs
 * by tests/header.rs: edit the cells, then run `make header`.
 *
 * The C tests never list these functions themselves: they include
 * op_table.h, which expands the rows into an enum (OP_<name>), a table of
 * what a generic caller needs (OPS[]) and one call_op() switch.
 * tests/header_tables.rs parses the header and fails when a function that
 * takes a tensor handle has no row here.
 *
 *   AG_OP(name, arity, s0, s1, s2, call)
 *       An op: ag_<name>(ctx, ...) takes `arity` tensor handles (by value,
 *       through a const pointer, or as an array: `t` itself is an array of
 *       `arity` valid handles, so ag_concat's row passes `t` and `arity`)
 *       and returns a new tensor through its last parameter `out`.
 *   AG_HANDLE_FN(name, arity, need, has_out, s0, call)
 *       Any other function taking a tensor handle: queries, backward, writes.
 *
 * s0, s1, s2  valid shapes of tensor arguments 0, 1, 2, in parentheses;
 *             (1) in a slot past `arity`.
 * need        what argument 0 must be, besides its shape, for the call to
 *             succeed: AG_NEED_ANY, AG_NEED_GRAD (a tensor that has a
 *             gradient), AG_NEED_PARAM (a parameter), AG_NEED_LOSS (a loss;
 *             the call uses up the iteration's one backward).
 * has_out     the function writes a result through a pointer that a test
 *             can pass as NULL (NULL_ARGUMENT, naming the function).
 * call        an expression making the call with valid non-tensor
 *             arguments, in terms of `c` (the context), `t` (the tensor
 *             arguments), `out` (ag_tensor *, may be NULL) and `s`
 *             (op_scratch *, buffers for results that are not tensors;
 *             AG_OUT(p) is p, or NULL when out is NULL).
 *
 * The shapes, the call and any tensors a test makes of those shapes must
 * form a valid call: tests check that every row succeeds.
 */
";

/// The C row kinds, in the order ops.def lists them, with the names of
/// their columns after `name`.
const OPS_DEF_KINDS: [(&str, &[&str]); 2] = [
    ("AG_OP", &["arity", "s0", "s1", "s2", "call"]),
    ("AG_HANDLE_FN", &["arity", "need", "has_out", "s0", "call"]),
];

/// The top-level comma-separated arguments of a C macro call's argument
/// list (commas inside (), [] or {} do not split).
fn split_args(args: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, ch) in args.char_indices() {
        match ch {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(args[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(args[start..].trim());
    out
}

/// tests/c/ops.def as generated from the `c:` cells of the table: the
/// rows of each kind in table order, in aligned columns. Panics naming a
/// row whose cell has an unknown kind or the wrong number of columns.
pub fn ops_def() -> String {
    let rows = c_functions();
    let mut out = String::from(OPS_DEF_PREAMBLE);
    for (kind, columns) in OPS_DEF_KINDS {
        let mut lines: Vec<Vec<String>> = Vec::new();
        for r in &rows {
            let Some((k, args)) = r.c_row else { continue };
            assert!(
                OPS_DEF_KINDS.iter().any(|(known, _)| *known == k),
                "{}: c: {k}(...) is neither AG_OP nor AG_HANDLE_FN",
                r.name
            );
            if k != kind {
                continue;
            }
            let name = r.name.strip_prefix("ag_").unwrap_or(r.name);
            let mut cells = vec![format!("{kind}({name},")];
            let args = split_args(args);
            assert_eq!(
                args.len(),
                columns.len(),
                "{}: c: {kind}(\"...\") needs {} arguments after the name ({}), has {:?}",
                r.name,
                columns.len(),
                columns.join(", "),
                args
            );
            for (i, a) in args.iter().enumerate() {
                let last = i + 1 == args.len();
                cells.push(if last {
                    format!("{a})")
                } else {
                    format!("{a},")
                });
            }
            lines.push(cells);
        }
        // Column widths: the widest cell of each column.
        let widths: Vec<usize> = (0..=columns.len())
            .map(|i| lines.iter().map(|l| l[i].len()).max().unwrap_or(0))
            .collect();
        // A heading names each column above its cells ("name" after the
        // "KIND(" its cells start with).
        let mut labels = vec![(kind.len() + 1, "name")];
        let mut start = 0;
        for (i, column) in columns.iter().enumerate() {
            start += widths[i] + 1;
            labels.push((start, column));
        }
        let mut heading = String::from("/*");
        for (at, label) in labels {
            let pad = at.saturating_sub(heading.len()).max(1);
            heading.push_str(&" ".repeat(pad));
            heading.push_str(label);
        }
        out.push('\n');
        out.push_str(&heading);
        out.push_str(" */\n");
        for l in &lines {
            let mut line = String::new();
            for (i, cell) in l.iter().enumerate() {
                line.push_str(cell);
                if i + 1 < l.len() {
                    line.push_str(&" ".repeat(widths[i] + 1 - cell.len()));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
    }
    out
}
