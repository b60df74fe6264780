//! The header's constants: tensor and checkpoint limits, and the version.

/// Most dimensions a tensor can have.
pub const AG_MAX_DIMS: usize = 6;
const _: () = assert!(AG_MAX_DIMS == crate::shape::MAX_DIMS);

/// Most tensors one ag_concat joins.
pub const AG_MAX_CONCAT: usize = 8;
const _: () = assert!(AG_MAX_CONCAT == crate::ops::MAX_CONCAT);

/// Most user bytes a checkpoint may carry (64 MiB).
pub const AG_MAX_USER_BYTES: usize = 64 << 20;
const _: () = assert!(AG_MAX_USER_BYTES == crate::checkpoint::MAX_USER_BYTES);

/// Major version of this header; the library's is ag_version_number() / 10000.
pub const AG_VERSION_MAJOR: u32 = 0;
/// Minor version of this header.
pub const AG_VERSION_MINOR: u32 = 1;
/// Patch version of this header.
pub const AG_VERSION_PATCH: u32 = 0;
/// AG_VERSION_MAJOR * 10000 + AG_VERSION_MINOR * 100 + AG_VERSION_PATCH,
/// comparable with ag_version_number() at run time.
pub const AG_VERSION_NUMBER: u32 =
    AG_VERSION_MAJOR * 10000 + AG_VERSION_MINOR * 100 + AG_VERSION_PATCH;

// The version macros are literals so that cbindgen can copy them into the
// header; this stops the build when they drift from Cargo.toml's version.
const fn parse_u32(s: &str) -> u32 {
    let b = s.as_bytes();
    let mut i = 0;
    let mut n = 0u32;
    while i < b.len() {
        assert!(b[i].is_ascii_digit(), "version part is not a number");
        n = n * 10 + (b[i] - b'0') as u32;
        i += 1;
    }
    n
}
const _: () = assert!(AG_VERSION_MAJOR == parse_u32(env!("CARGO_PKG_VERSION_MAJOR")));
const _: () = assert!(AG_VERSION_MINOR == parse_u32(env!("CARGO_PKG_VERSION_MINOR")));
const _: () = assert!(AG_VERSION_PATCH == parse_u32(env!("CARGO_PKG_VERSION_PATCH")));
const _: () = assert!(AG_VERSION_MINOR < 100 && AG_VERSION_PATCH < 100);
