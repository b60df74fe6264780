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
fn raw(header: &str, data: &[u8]) -> Vec<u8> {
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
            r#"{"a":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}"#,
            &one,
        )),
        "tensor `a` has dtype F16; only F32 is supported",
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
