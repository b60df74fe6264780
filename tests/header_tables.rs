//! The one table of C functions (tests/common/c_functions.rs, whose top
//! comment is the checklist for adding a C function) and the tables kept
//! elsewhere are checked against include/arenagrad.h, so a function added
//! to the API cannot be forgotten in them:
//!
//! * the one table must have exactly one row per function of the header;
//! * the NULL-context table (generated from the one table into
//!   tests/common/null_context.rs, run by tests/ffi_contract.rs) must call
//!   every function that takes a context;
//! * the C op table (tests/c/ops.def, used by every C test that iterates
//!   over functions, generated from the one table's `c:` cells) must have
//!   an `AG_OP` row for every op function and an `AG_HANDLE_FN` row for
//!   every other function that takes a tensor handle, and no row for
//!   anything else.
//!
//! Definitions, on the header's declarations:
//! * a function *takes a context* when its first parameter is
//!   `struct ag_context *` (not const, not a pointer to a pointer);
//! * an *op function* takes a context, at least one tensor handle (a
//!   `struct ag_tensor` by value, or a `const struct ag_tensor *` such as
//!   ag_linear's bias), returns `ag_status`, and writes a new tensor through
//!   its last parameter, `struct ag_tensor *out`;
//! * a *handle function* takes a context and a `struct ag_tensor` by value
//!   and is not an op function (queries, backward, parameter writes).
//!
//! Functions named `ag_test_*` exist for tests only and are not part of every
//! build's header: they are never required in a table, nor refused.

mod common;

use arenagrad::ffi::ag_tensor;
use common::null_context::c_function_rows::{c_functions, rows_named};
use common::null_context::{calls_with_a_null_context, without_a_null_context_status};
use std::collections::BTreeSet;
use std::path::Path;

/// A function declared in the header.
#[derive(Debug)]
struct Function {
    name: String,
    ret: String,
    params: Vec<String>,
}

impl Function {
    fn takes_context(&self) -> bool {
        self.params
            .first()
            .is_some_and(|p| p.starts_with("struct ag_context *") && !p.contains("**"))
    }

    fn by_value_tensor(p: &str) -> bool {
        p.starts_with("struct ag_tensor ") && !p.contains('*')
    }

    fn takes_handle(&self) -> bool {
        self.params.iter().any(|p| Self::by_value_tensor(p))
    }

    fn is_op(&self) -> bool {
        let tensor_in = self
            .params
            .iter()
            .any(|p| Self::by_value_tensor(p) || p.starts_with("const struct ag_tensor *"));
        self.ret == "ag_status"
            && self.takes_context()
            && tensor_in
            && self
                .params
                .last()
                .is_some_and(|p| p == "struct ag_tensor *out")
    }

    fn is_handle_fn(&self) -> bool {
        self.takes_context() && self.takes_handle() && !self.is_op()
    }

    fn test_only(&self) -> bool {
        self.name.starts_with("ag_test_")
    }
}

fn read(rel: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// C source without comments and preprocessor lines.
fn strip_c(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("/*") {
            rest = r.find("*/").map_or("", |i| &r[i + 2..]);
            out.push(' ');
        } else if let Some(r) = rest.strip_prefix("//") {
            rest = r.find('\n').map_or("", |i| &r[i..]);
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `ag_*` function declared in the header.
fn header_functions() -> Vec<Function> {
    let text = strip_c(&read("include/arenagrad.h"));
    let mut out = Vec::new();
    for stmt in text.split(';') {
        // Declarations follow the last brace (struct bodies, extern "C" {).
        let decl = stmt.rsplit(['{', '}']).next().unwrap_or("");
        let decl = decl.split_whitespace().collect::<Vec<_>>().join(" ");
        // A deprecated alias's declaration starts with AG_DEPRECATED("...").
        let decl = match decl.strip_prefix("AG_DEPRECATED(") {
            Some(r) => r
                .split_once(") ")
                .map_or(String::new(), |(_, d)| d.to_string()),
            None => decl,
        };
        let (Some(open), Some(close)) = (decl.find('('), decl.rfind(')')) else {
            continue;
        };
        let head = decl[..open].trim_end();
        let name_at = head
            .rfind(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let name = &head[name_at..];
        if !name.starts_with("ag_") || decl.starts_with("typedef") {
            continue;
        }
        let params = decl[open + 1..close]
            .split(',')
            .map(|p| p.trim().to_string())
            .filter(|p| !p.is_empty() && p != "void")
            .collect();
        out.push(Function {
            name: name.to_string(),
            ret: head[..name_at].trim().to_string(),
            params,
        });
    }
    out
}

/// The functions whose `c:` cell in tests/common/c_functions.rs is a row
/// of `kind` (`AG_OP` or `AG_HANDLE_FN`) in the generated tests/c/ops.def
/// (tests/header.rs checks the committed file is what they generate).
fn ops_def_rows(kind: &str) -> Vec<&'static str> {
    c_functions()
        .into_iter()
        .filter(|r| r.c_row.is_some_and(|(k, _)| k == kind))
        .map(|r| r.name)
        .collect()
}

/// The parser sees what the header declares: a few functions of each kind,
/// classified as they must be (so a broken parser cannot pass the tests
/// below by finding nothing).
#[test]
fn the_header_parser_classifies_known_functions() {
    let fns = header_functions();
    let get = |n: &str| {
        fns.iter()
            .find(|f| f.name == n)
            .unwrap_or_else(|| panic!("{n} not found in include/arenagrad.h: {fns:#?}"))
    };
    for op in ["ag_add", "ag_linear", "ag_embedding", "ag_attention"] {
        assert!(get(op).is_op(), "{op} is an op: {:?}", get(op));
    }
    for f in ["ag_tensor_read", "ag_backward", "ag_param_write"] {
        assert!(get(f).is_handle_fn(), "{f} is a handle function");
    }
    for f in [
        "ag_reset",
        "ag_tensor_new",
        "ag_param_new",
        "ag_checkpoint_load",
    ] {
        assert!(get(f).takes_context() && !get(f).is_op() && !get(f).is_handle_fn());
    }
    for f in [
        "ag_context_new",
        "ag_context_free",
        "ag_context_last_error",
        "ag_version",
        "ag_version_number",
    ] {
        assert!(!get(f).takes_context(), "{f} takes no context to be NULL");
    }
    assert_eq!(get("ag_tensor_item").ret, "ag_status");
    assert!(fns.len() >= 50, "only {} functions parsed", fns.len());
}

/// The one table has a row for each function of the header, once, and no
/// row for anything else (the test hooks are not in the header).
#[test]
fn every_header_function_has_a_row_in_the_c_function_table() {
    let fns = header_functions();
    let rows = c_functions();
    assert!(rows.len() >= 100, "only {} rows", rows.len());
    let mut problems = Vec::new();
    for f in fns.iter().filter(|f| !f.test_only()) {
        match rows_named(&f.name).len() {
            0 => problems.push(format!(
                "{} has no row in tests/common/c_functions.rs (see the checklist at \
                 its top)",
                f.name
            )),
            1 => {}
            k => problems.push(format!(
                "{} has {k} rows in tests/common/c_functions.rs",
                f.name
            )),
        }
    }
    for r in rows.iter().filter(|r| !r.name.starts_with("ag_test_")) {
        if !fns.iter().any(|f| f.name == r.name) {
            problems.push(format!(
                "{} has a row in tests/common/c_functions.rs but is not in \
                 include/arenagrad.h",
                r.name
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_function_is_in_the_null_context_table() {
    let fns = header_functions();
    let handle = ag_tensor {
        index: 0,
        context: 1,
        generation: 0,
    };
    let table: BTreeSet<&str> = calls_with_a_null_context(handle, handle)
        .into_iter()
        .map(|(name, _)| name)
        .collect();
    let exempt: BTreeSet<&str> = without_a_null_context_status()
        .iter()
        .map(|e| e.0)
        .collect();
    let mut problems = Vec::new();
    for f in fns.iter().filter(|f| !f.test_only()) {
        let name = f.name.as_str();
        if exempt.contains(name) {
            if f.takes_context() {
                problems.push(format!(
                    "{name} takes a context: its null: cell in tests/common/c_functions.rs \
                     must be call(...), not none(...)"
                ));
            }
        } else if !table.contains(name) {
            problems.push(format!(
                "{name} is not called with a NULL context: give it a row with a \
                 null: call(...) cell in tests/common/c_functions.rs"
            ));
        }
    }
    for name in table.iter().chain(&exempt) {
        if !name.starts_with("ag_test_") && !fns.iter().any(|f| f.name == *name) {
            problems.push(format!(
                "{name} is in the NULL-context table (tests/common/c_functions.rs) but \
                 not in the header"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn every_function_taking_a_tensor_has_a_row_in_ops_def() {
    let fns = header_functions();
    let mut problems = Vec::new();
    for (kind, rows, of_kind) in [
        (
            "AG_OP",
            ops_def_rows("AG_OP"),
            Function::is_op as fn(&Function) -> bool,
        ),
        (
            "AG_HANDLE_FN",
            ops_def_rows("AG_HANDLE_FN"),
            Function::is_handle_fn,
        ),
    ] {
        let seen: BTreeSet<&str> = rows.iter().copied().collect();
        for f in fns.iter().filter(|f| of_kind(f) && !f.test_only()) {
            if !seen.contains(f.name.as_str()) {
                problems.push(format!(
                    "{} needs a `c: {kind}(\"...\")` cell in tests/common/c_functions.rs \
                     (its row of tests/c/ops.def; then `make header`)",
                    f.name
                ));
            }
        }
        for r in &seen {
            if !fns.iter().any(|f| f.name == *r && of_kind(f)) {
                problems.push(format!(
                    "{r} has a `c: {kind}(...)` cell in tests/common/c_functions.rs but \
                     is not such a function of the header"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
