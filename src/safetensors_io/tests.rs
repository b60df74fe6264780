use super::*;

fn dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ag_st_{tag}_{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn sample() -> Vec<u8> {
    let w: Vec<f32> = (0..6).map(|i| i as f32 * 0.5 - 1.0).collect();
    to_bytes(&[("w", &[2, 3], &w), ("b", &[2], &[0.25, -3.0])]).unwrap()
}

fn is_bad(r: Result<Vec<NamedTensor>>, needle: &str) {
    match r {
        Err(e @ Error::BadFile { .. }) => {
            assert!(e.to_string().contains(needle), "{e} lacks {needle:?}")
        }
        other => panic!("expected BadFile ({needle}), got {other:?}"),
    }
}

/// Builds a file from a raw header (padded to 8 bytes) and data bytes.
pub(super) fn raw(header: &str, data: &[u8]) -> Vec<u8> {
    let mut h = header.as_bytes().to_vec();
    h.resize(h.len().next_multiple_of(8), b' ');
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&h);
    out.extend_from_slice(data);
    out
}

#[test]
#[cfg_attr(miri, ignore)] // file I/O needs isolation off
fn round_trip_keeps_names_shapes_and_bits() {
    let d = dir("rt");
    let path = d.join("m.safetensors");
    let special = [
        0.0f32,
        -0.0,
        f32::MIN_POSITIVE / 4.0,
        f32::MAX,
        f32::INFINITY,
        f32::NAN,
    ];
    let big: Vec<f32> = (0..1000).map(|i| (i as f32).sin()).collect();
    save(
        &path,
        &[
            ("z.scalar", &[], &[7.5]),
            ("a.special", &[2, 3], &special),
            ("h.0.w", &[10, 10, 10], &big),
        ],
    )
    .unwrap();
    let got = load(&path).unwrap();
    let names: Vec<&str> = got.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["a.special", "h.0.w", "z.scalar"]);
    assert_eq!(got[0].shape, [2, 3]);
    assert_eq!(got[1].shape, [10, 10, 10]);
    assert_eq!(got[2].shape, Vec::<usize>::new());
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&got[0].data), bits(&special));
    assert_eq!(bits(&got[1].data), bits(&big));
    assert_eq!(got[2].data, [7.5]);
    let again = from_bytes(&std::fs::read(&path).unwrap()).unwrap();
    assert!(
        again
            .iter()
            .zip(&got)
            .all(|(a, b)| a.name == b.name && a.shape == b.shape && bits(&a.data) == bits(&b.data))
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn bad_input_to_save_is_refused() {
    let v = [1.0f32; 4];
    for (t, needle) in [
        (
            vec![("a", &[4][..], &v[..]), ("a", &[4], &v)],
            "duplicate tensor name `a`",
        ),
        (vec![("a", &[3], &v)], "4 values for shape [3]"),
        (vec![("", &[4], &v)], "empty or reserved"),
        (vec![("__metadata__", &[4], &v)], "empty or reserved"),
        (vec![("a", &[usize::MAX, 2], &v)], "too large"),
    ] {
        let e = to_bytes(&t).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
        assert!(e.to_string().contains(needle), "{e}");
    }
}

/// Every prefix of a valid file is refused, as is any trailing byte.
#[test]
fn every_truncation_and_trailing_bytes_are_refused() {
    let bytes = sample();
    assert_eq!(from_bytes(&bytes).unwrap().len(), 2);
    for cut in 0..bytes.len() {
        let r = from_bytes(&bytes[..cut]);
        assert!(matches!(r, Err(Error::BadFile { .. })), "cut {cut}: {r:?}");
    }
    is_bad(from_bytes(&bytes[..bytes.len() - 1]), "truncated");
    is_bad(from_bytes(&bytes[..5]), "truncated");
    let mut long = bytes.clone();
    long.push(0);
    is_bad(
        from_bytes(&long),
        "describes 32 data bytes, the file has 33",
    );
}

/// No single bit flip makes the reader panic or read out of bounds:
/// the result is an error or a file of the same layout.
#[test]
fn bit_flips_never_panic() {
    let bytes = sample();
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[i] ^= 1 << bit;
            if let Ok(t) = from_bytes(&b) {
                assert!(
                    t.iter()
                        .all(|t| t.data.len() == t.shape.iter().product::<usize>())
                );
            }
        }
    }
}

#[test]
fn malformed_headers_are_refused_with_the_reason() {
    let one = 1.0f32.to_le_bytes();
    let t = r#""dtype":"F32","shape":[1],"data_offsets""#;
    is_bad(
        from_bytes(&raw(
            &format!("{{\"a\":{{{t}:[0,4]}},\"a\":{{{t}:[0,4]}}}}"),
            &one,
        )),
        "duplicate tensor name `a`",
    );
    is_bad(
        from_bytes(&raw(
            r#"{"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}"#,
            &[0; 8],
        )),
        "tensor `a` has dtype F64; only F32, F16 and BF16 are supported",
    );
    is_bad(
        from_bytes(&raw(
            r#"{"a":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}}"#,
            &one,
        )),
        "tensor `a` has dtype I32; only F32, F16 and BF16",
    );
    is_bad(
        from_bytes(&raw(&format!("{{\"a\":{{{t}:[0,8]}}}}"), &[0; 8])),
        "tensor `a`: shape [1] of F32 does not fit data_offsets [0, 8]",
    );
    is_bad(
        from_bytes(&raw(
            &format!("{{\"a\":{{{t}:[0,4]}},\"b\":{{{t}:[0,4]}}}}"),
            &[0; 8],
        )),
        "invalid offset for tensor",
    );
    is_bad(from_bytes(&raw("[1, 2]", &[])), "not a JSON object");
    is_bad(from_bytes(&raw("{\"a\": 1", &[])), "not a JSON object");
    let mut not_utf8 = raw("{}", &[]);
    not_utf8[8] = 0xff;
    is_bad(from_bytes(&not_utf8), "not UTF-8");
    // Metadata and an empty file of tensors are fine.
    let ok = raw(r#"{"__metadata__":{"format":"pt"}}"#, &[]);
    assert!(from_bytes(&ok).unwrap().is_empty());
}

/// A corrupt header length is refused before anything is allocated for
/// it, whether past the limit or past the end of the file; an endless
/// device is not read to exhaustion.
#[test]
#[cfg_attr(miri, ignore)] // file I/O needs isolation off
fn corrupt_lengths_and_endless_files_are_refused_cheaply() {
    let d = dir("len");
    let path = d.join("m.safetensors");
    let good = sample();
    for (n, needle) in [
        (u64::MAX, "exceeds the 16777216-byte limit"),
        (1 << 40, "exceeds"),
        (MAX_HEADER_BYTES, "truncated: header length 16777216"),
    ] {
        let mut b = good.clone();
        b[..8].copy_from_slice(&n.to_le_bytes());
        std::fs::write(&path, &b).unwrap();
        is_bad(load(&path), needle);
    }
    // The header claims far more data than the file holds.
    let t = r#"{"a":{"dtype":"F32","shape":[1000000000],"data_offsets":[0,4000000000]}}"#;
    std::fs::write(&path, raw(t, &[0; 16])).unwrap();
    is_bad(
        load(&path),
        "truncated: the header describes 4000000000 data bytes",
    );
    std::fs::write(&path, &good[..good.len() - 3]).unwrap();
    is_bad(load(&path), "truncated");
    std::fs::write(&path, &good[..3]).unwrap();
    is_bad(load(&path), "less than the 8-byte header length");
    if Path::new("/dev/zero").exists() {
        is_bad(load(Path::new("/dev/zero")), "not a JSON object");
    }
    let e = load(&d.join("missing.safetensors")).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
#[cfg_attr(miri, ignore)] // file I/O needs isolation off
fn save_is_atomic_and_io_errors_leave_no_temporary() {
    let d = dir("atomic");
    let path = d.join("m.safetensors");
    save(&path, &[("a", &[1], &[1.0])]).unwrap();
    save(&path, &[("b", &[2], &[2.0, 3.0])]).unwrap();
    let got = load(&path).unwrap();
    assert_eq!((got.len(), got[0].name.as_str()), (1, "b"));
    let e = save(&d.join("no").join("m.safetensors"), &[("a", &[1], &[1.0])]).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    // A refused input leaves the earlier file as it was.
    assert!(save(&path, &[("a", &[3], &[1.0])]).is_err());
    assert_eq!(load(&path).unwrap(), got);
    let left: Vec<_> = std::fs::read_dir(&d).unwrap().collect();
    assert_eq!(left.len(), 1, "{left:?}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// binary16's value by its definition, in f64 arithmetic: (-1)^s * 2^-14 *
/// m/1024 for exponent 0, (-1)^s * 2^(e-15) * (1 + m/1024) otherwise.
fn f16_reference(h: u16) -> f64 {
    let sign = if h & 0x8000 != 0 { -1.0 } else { 1.0 };
    let e = i32::from((h >> 10) & 0x1f);
    let m = f64::from(h & 0x3ff);
    match e {
        0 => sign * m / 1024.0 * 2f64.powi(-14),
        31 if m == 0.0 => sign * f64::INFINITY,
        31 => f64::NAN,
        _ => sign * (1.0 + m / 1024.0) * 2f64.powi(e - 15),
    }
}

#[test]
fn every_f16_converts_exactly() {
    for h in 0..=u16::MAX {
        let got = f16_to_f32(h);
        let want = f16_reference(h);
        if want.is_nan() {
            assert!(got.is_nan(), "{h:#06x}: {got}");
            // The payload stays in the mantissa's top bits, the sign too.
            let payload = u32::from(h & 0x3ff) << 13;
            assert_eq!(got.to_bits() & 0x007f_ffff, payload, "{h:#06x}");
            assert_eq!(got.is_sign_negative(), h & 0x8000 != 0, "{h:#06x}");
        } else {
            // f32 -> f64 is exact, so this compares the exact values; the
            // sign of zero is compared apart.
            assert_eq!(f64::from(got), want, "{h:#06x}");
            assert_eq!(got.is_sign_negative(), h & 0x8000 != 0, "{h:#06x}");
        }
    }
}

#[test]
fn bf16_spot_values() {
    for (h, want) in [
        (0x0000u16, 0.0f32),
        (0x3f80, 1.0),
        (0xc000, -2.0),
        (0x3e20, 0.15625),
        (0x7f7f, 255.0 * 2f32.powi(120)), // largest finite
        (0x0080, f32::MIN_POSITIVE),
        (0x0001, 2f32.powi(-133)),         // smallest subnormal
        (0x007f, 127.0 * 2f32.powi(-133)), // largest subnormal
        (0x7f80, f32::INFINITY),
        (0xff80, f32::NEG_INFINITY),
    ] {
        assert_eq!(bf16_to_f32(h), want, "{h:#06x}");
    }
    assert_eq!(bf16_to_f32(0x7f7f), 3.389_531_4e38); // f32's shortest text of it
    assert_eq!(bf16_to_f32(0x8000).to_bits(), 0x8000_0000); // -0.0
    for nan in [0x7fc0u16, 0x7f81, 0xffc1] {
        assert!(bf16_to_f32(nan).is_nan(), "{nan:#06x}");
        assert_eq!(bf16_to_f32(nan).to_bits(), u32::from(nan) << 16);
    }
}

/// F16 and BF16 tensors load as f32 beside F32 ones, in one file.
#[test]
fn half_precision_tensors_load_as_f32() {
    let h: Vec<u8> = [0x3c00u16, 0xc400, 0x0001, 0x7c00]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let b: Vec<u8> = [0x3f80u16, 0xbfc0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let mut data = h.clone();
    data.extend_from_slice(&b);
    data.extend_from_slice(&0.5f32.to_le_bytes());
    let file = raw(
        concat!(
            r#"{"h":{"dtype":"F16","shape":[2,2],"data_offsets":[0,8]},"#,
            r#""b":{"dtype":"BF16","shape":[2],"data_offsets":[8,12]},"#,
            r#""f":{"dtype":"F32","shape":[],"data_offsets":[12,16]}}"#
        ),
        &data,
    );
    let got = from_bytes(&file).unwrap();
    let by = |n: &str| got.iter().find(|t| t.name == n).unwrap();
    assert_eq!(by("h").shape, [2, 2]);
    assert_eq!(by("h").data, [1.0, -4.0, 2f32.powi(-24), f32::INFINITY]);
    assert_eq!(by("b").data, [1.0, -1.5]);
    assert_eq!(by("f").data, [0.5]);
    // A half-precision range of the wrong size is refused like an F32 one.
    is_bad(
        from_bytes(&raw(
            r#"{"h":{"dtype":"F16","shape":[3],"data_offsets":[0,8]}}"#,
            &[0; 8],
        )),
        "tensor `h`: shape [3] of F16 does not fit data_offsets [0, 8]",
    );
}
