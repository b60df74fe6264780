//! ag_checkpoint_peek: validates like ag_checkpoint_load, returns the user
//! bytes, and never changes the model.

use arenagrad::ffi::*;
use std::ffi::CString;
use std::ptr::{null, null_mut};

fn model(init: f32) -> (*mut ag_context, ag_tensor) {
    let mut c = null_mut();
    assert_eq!(ag_context_new(&mut c), AG_STATUS_OK);
    let mut p = ag_tensor {
        index: 0,
        context: 0,
        generation: 0,
    };
    let data = [init; 6];
    assert_eq!(
        ag_param_new(c, [2usize, 3].as_ptr(), 2, data.as_ptr(), &mut p),
        AG_STATUS_OK
    );
    assert_eq!(
        ag_optimizer_adamw(c, 1e-3, 0.9, 0.999, 1e-8, 0.0),
        AG_STATUS_OK
    );
    (c, p)
}

fn values(c: *mut ag_context, p: ag_tensor) -> [f32; 6] {
    let mut v = [0.0; 6];
    assert_eq!(ag_tensor_read(c, p, v.as_mut_ptr(), 6), AG_STATUS_OK);
    v
}

#[test]
fn peek_returns_user_bytes_and_changes_nothing() {
    let dir = std::env::temp_dir().join(format!("ag_peek_{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = CString::new(dir.join("m.ckpt").to_str().unwrap()).unwrap();
    let (src, _) = model(1.0);
    let user = b"vocab:abc";
    assert_eq!(
        ag_checkpoint_save(src, path.as_ptr(), user.as_ptr(), user.len()),
        AG_STATUS_OK
    );

    let (mut dst, p) = model(2.0);
    let mut buf = [0u8; 64];
    let mut len = usize::MAX;
    assert_eq!(
        ag_checkpoint_peek(dst, path.as_ptr(), buf.as_mut_ptr(), buf.len(), &mut len),
        AG_STATUS_OK
    );
    assert_eq!(&buf[..len], user);
    assert_eq!(values(dst, p), [2.0; 6], "peek must not load parameters");

    // Bad inputs: each its own status, nothing changes, out-param untouched.
    let mut len2 = 7usize;
    assert_eq!(
        ag_checkpoint_peek(dst, null(), buf.as_mut_ptr(), 64, &mut len2),
        AG_STATUS_NULL_ARGUMENT
    );
    assert_eq!(
        ag_checkpoint_peek(dst, path.as_ptr(), buf.as_mut_ptr(), 64, null_mut()),
        AG_STATUS_NULL_ARGUMENT
    );
    assert_eq!(
        ag_checkpoint_peek(dst, path.as_ptr(), buf.as_mut_ptr(), 3, &mut len2),
        AG_STATUS_INVALID_ARGUMENT
    );
    assert_eq!(
        ag_checkpoint_peek(dst, path.as_ptr(), null_mut(), 64, &mut len2),
        AG_STATUS_NULL_ARGUMENT
    );
    let missing = CString::new(dir.join("missing.ckpt").to_str().unwrap()).unwrap();
    assert_eq!(
        ag_checkpoint_peek(dst, missing.as_ptr(), buf.as_mut_ptr(), 64, &mut len2),
        AG_STATUS_IO
    );
    let bytes = std::fs::read(dir.join("m.ckpt")).unwrap();
    std::fs::write(dir.join("cut.ckpt"), &bytes[..bytes.len() / 2]).unwrap();
    let cut = CString::new(dir.join("cut.ckpt").to_str().unwrap()).unwrap();
    assert_eq!(
        ag_checkpoint_peek(dst, cut.as_ptr(), buf.as_mut_ptr(), 64, &mut len2),
        AG_STATUS_CHECKPOINT_CORRUPT
    );
    let msg = unsafe { std::ffi::CStr::from_ptr(ag_context_last_error(dst)) }
        .to_str()
        .unwrap()
        .to_string();
    assert!(msg.contains("checkpoint corrupt"), "{msg}");
    assert_eq!(len2, 7);
    assert_eq!(values(dst, p), [2.0; 6]);
    assert_eq!(
        ag_checkpoint_peek(null_mut(), path.as_ptr(), buf.as_mut_ptr(), 64, &mut len2),
        AG_STATUS_NULL_ARGUMENT
    );

    // A model of another shape: mismatch.
    let mut other = null_mut();
    assert_eq!(ag_context_new(&mut other), AG_STATUS_OK);
    let mut q = ag_tensor {
        index: 0,
        context: 0,
        generation: 0,
    };
    assert_eq!(
        ag_param_new(other, [3usize, 2].as_ptr(), 2, null(), &mut q),
        AG_STATUS_OK
    );
    assert_eq!(
        ag_checkpoint_peek(other, path.as_ptr(), buf.as_mut_ptr(), 64, &mut len2),
        AG_STATUS_CHECKPOINT_MISMATCH
    );

    // Then a real load does commit.
    assert_eq!(
        ag_checkpoint_load(dst, path.as_ptr(), buf.as_mut_ptr(), 64, &mut len),
        AG_STATUS_OK
    );
    assert_eq!(values(dst, p), [1.0; 6]);
    let mut src = src;
    for c in [&mut src, &mut dst, &mut other] {
        assert_eq!(ag_context_free(c), AG_STATUS_OK);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
