//! Gives the shared library its SONAME, `libarenagrad.so.<major>`, on Linux.
//!
//! Set here rather than when installing, so every build of the cdylib
//! (`cargo build`, `cargo test`, the C tests) is the same file that
//! `make install` copies: nothing is relinked or patched at install time,
//! and a program linked against `target/release/libarenagrad.so` records the
//! versioned name it will find in an installed prefix.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
    if os == "linux" {
        println!("cargo::rustc-cdylib-link-arg=-Wl,-soname,libarenagrad.so.{major}");
    }
}
