use super::tests::raw;
use super::*;

const SHARD1: &str = "model-00001-of-00002.safetensors";
const SHARD2: &str = "model-00002-of-00002.safetensors";

fn folder(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("ag_st_shard_{tag}_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A model of three parameters `w` [2,3], `b` [2], `s` [1], all zeros.
fn model() -> (Context, [crate::Tensor; 3]) {
    let mut c = Context::new();
    let w = c.param_named("w", &[2, 3], None).unwrap();
    let b = c.param_named("b", &[2], None).unwrap();
    let s = c.param_named("s", &[1], None).unwrap();
    (c, [w, b, s])
}

fn values(c: &Context, t: crate::Tensor, n: usize) -> Vec<f32> {
    let mut v = vec![0.0; n];
    c.read(t, &mut v).unwrap();
    v
}

/// Shard 1: `w` as float32; shard 2: `b` as bfloat16 and `s` as float16.
fn write_shards(d: &Path) {
    let w: Vec<f32> = (0..6).map(|i| i as f32 - 2.5).collect();
    std::fs::write(d.join(SHARD1), to_bytes(&[("w", &[2, 3], &w)]).unwrap()).unwrap();
    let mut data = Vec::new();
    for h in [0x3f80u16, 0xc0a0, 0x3800] {
        data.extend_from_slice(&h.to_le_bytes());
    }
    let header = concat!(
        r#"{"b":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"#,
        r#""s":{"dtype":"F16","shape":[1],"data_offsets":[4,6]}}"#
    );
    std::fs::write(d.join(SHARD2), raw(header, &data)).unwrap();
}

fn write_index(d: &Path, map: &str) -> std::path::PathBuf {
    let p = d.join("model.safetensors.index.json");
    let text = format!(r#"{{"metadata": {{"total_size": 30}}, "weight_map": {{{map}}}}}"#);
    std::fs::write(&p, text).unwrap();
    p
}

fn good_map() -> String {
    format!(r#""b": "{SHARD2}", "s": "{SHARD2}", "w": "{SHARD1}""#)
}

#[test]
#[cfg_attr(miri, ignore)] // file I/O needs isolation off
fn a_sharded_checkpoint_loads_every_tensor_from_its_shard() {
    let d = folder("ok");
    write_shards(&d);
    let index = write_index(&d, &good_map());
    let (mut c, [w, b, s]) = model();
    c.safetensors_load_index(&index).unwrap();
    assert_eq!(values(&c, w, 6), [-2.5, -1.5, -0.5, 0.5, 1.5, 2.5]);
    assert_eq!(values(&c, b, 2), [1.0, -5.0]);
    assert_eq!(values(&c, s, 1), [0.5]);
    std::fs::remove_dir_all(&d).unwrap();
}

/// Each way the index and shards can disagree is refused with a message
/// naming the file and the tensor, and changes nothing.
#[test]
#[cfg_attr(miri, ignore)] // file I/O needs isolation off
fn disagreeing_indexes_are_refused_and_change_nothing() {
    let d = folder("bad");
    write_shards(&d);
    let two = format!(r#""b": "{SHARD2}", "s": "{SHARD2}", "w": "{SHARD1}", "x": "{SHARD1}""#);
    let cases: Vec<(String, &str)> = vec![
        (
            format!(r#""b": "{SHARD1}", "s": "{SHARD2}", "w": "{SHARD2}""#),
            "tensor `w` is in model-00001-of-00002.safetensors, but the weight_map names \
             model-00002-of-00002.safetensors",
        ),
        (
            format!(r#""b": "{SHARD2}", "s": "{SHARD2}", "w": "{SHARD2}""#),
            "tensor `w` is in no shard (the weight_map names model-00002-of-00002.safetensors, \
             which lacks it)",
        ),
        (
            format!(r#""b": "{SHARD2}", "w": "{SHARD1}""#),
            "tensor `s` of model-00002-of-00002.safetensors is not in the weight_map",
        ),
        (
            two,
            "tensor `x` is in no shard (the weight_map names model-00001-of-00002.safetensors",
        ),
        (
            format!(r#""b": "{SHARD2}", "s": "{SHARD2}", "w": "{SHARD1}", "w": "{SHARD1}""#),
            "tensor `w` is in the weight_map twice",
        ),
        (
            format!(r#""b": "{SHARD2}", "s": "../{SHARD2}", "w": "{SHARD1}""#),
            "tensor `s`: shard `../model-00002-of-00002.safetensors` is not a file name",
        ),
        (r#""w": 3"#.into(), "not an index of a sharded checkpoint"),
    ];
    let mut c = Context::new();
    let w = c.param_named("w", &[2, 3], Some(&[7.0; 6])).unwrap();
    c.param_named("b", &[2], None).unwrap();
    c.param_named("s", &[1], None).unwrap();
    for (map, needle) in cases {
        let index = write_index(&d, &map);
        let e = c.safetensors_load_index(&index).unwrap_err();
        assert!(matches!(e, Error::BadFile { .. }), "{e}");
        let text = e.to_string();
        assert!(text.contains(needle), "{text} lacks {needle:?}");
        assert!(text.contains("model.safetensors.index.json"), "{text}");
        assert_eq!(values(&c, w, 6), [7.0; 6]);
    }
    // A tensor in two shards: the second names both files.
    let ones: Vec<f32> = vec![1.0; 6];
    std::fs::write(
        d.join("model-00003-of-00003.safetensors"),
        to_bytes(&[("w", &[2, 3], &ones)]).unwrap(),
    )
    .unwrap();
    let index = write_index(
        &d,
        &format!(
            "{}, \"z\": \"model-00003-of-00003.safetensors\"",
            good_map()
        ),
    );
    let e = c.safetensors_load_index(&index).unwrap_err().to_string();
    assert!(
        e.contains(
            "tensor `w` is in two shards, model-00001-of-00002.safetensors and \
             model-00003-of-00003.safetensors"
        ),
        "{e}"
    );
    // A missing shard is an I/O error naming it.
    std::fs::remove_file(d.join(SHARD2)).unwrap();
    let index = write_index(&d, &good_map());
    let e = c.safetensors_load_index(&index).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    assert!(e.to_string().contains(SHARD2), "{e}");
    // Shards that agree with their index but not with the model.
    write_shards(&d);
    let index = write_index(&d, &format!(r#""w": "{SHARD1}""#));
    let e = c.safetensors_load_index(&index).unwrap_err();
    assert!(matches!(e, Error::Mismatch { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("parameter `b` [2] is not in the file"),
        "{e}"
    );
    assert_eq!(values(&c, w, 6), [7.0; 6]);
    let e = c
        .safetensors_load_index(&d.join("missing.index.json"))
        .unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
    // An index that is not text is a damaged file, not an I/O error.
    let index = d.join("binary.index.json");
    std::fs::write(&index, [0xff, 0xfe, b'{']).unwrap();
    let e = c.safetensors_load_index(&index).unwrap_err();
    assert!(matches!(e, Error::BadFile { .. }), "{e}");
    std::fs::remove_dir_all(&d).unwrap();
}
