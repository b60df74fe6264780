//! The version three ways must agree: Cargo.toml's (through cargo's
//! environment), the header's AG_VERSION_* macros, and what the library
//! reports at run time (ag_version, ag_version_number).

use arenagrad::ffi::*;
use std::ffi::CStr;

fn cargo_version() -> (u32, u32, u32) {
    let p = |s: &str| s.parse::<u32>().expect("numeric version part");
    (
        p(env!("CARGO_PKG_VERSION_MAJOR")),
        p(env!("CARGO_PKG_VERSION_MINOR")),
        p(env!("CARGO_PKG_VERSION_PATCH")),
    )
}

#[test]
fn constants_and_functions_match_cargo_toml() {
    let (major, minor, patch) = cargo_version();
    assert_eq!(
        (AG_VERSION_MAJOR, AG_VERSION_MINOR, AG_VERSION_PATCH),
        (major, minor, patch)
    );
    assert_eq!(AG_VERSION_NUMBER, major * 10000 + minor * 100 + patch);
    assert_eq!(ag_version_number(), AG_VERSION_NUMBER);
    let s = unsafe { CStr::from_ptr(ag_version()) }.to_str().unwrap();
    assert_eq!(s, env!("CARGO_PKG_VERSION"));
    assert_eq!(s, format!("{major}.{minor}.{patch}"));
}

/// The committed header carries the same numbers (cbindgen copies the
/// constants; this guards against a header generated before a version bump).
#[test]
fn header_macros_match_cargo_toml() {
    let header =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/include/arenagrad.h"))
            .unwrap();
    let define = |name: &str| -> u32 {
        let prefix = format!("#define {name} ");
        let line = header
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("{name} is not defined in the header"));
        line[prefix.len()..].trim().parse().unwrap()
    };
    let (major, minor, patch) = cargo_version();
    assert_eq!(define("AG_VERSION_MAJOR"), major);
    assert_eq!(define("AG_VERSION_MINOR"), minor);
    assert_eq!(define("AG_VERSION_PATCH"), patch);
    assert!(
        header.contains("uint32_t ag_version_number(void);"),
        "ag_version_number is not declared"
    );
}
