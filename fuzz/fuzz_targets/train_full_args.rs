//! Fuzzes `parse_args` of c_examples/train_full/args.c (compiled on its own
//! by build.rs). The input is split at NUL bytes into argv[1..]; argv[0] is
//! "train_full".
//!
//! Checks: parse_args returns 0 or 2 (EXIT_USAGE), the same for every error
//! buffer size; on failure the message is non-empty and NUL-terminated
//! within errlen; nothing is written past errlen or past the first 4 KiB of
//! the (opaque, 64 KiB, 16-byte aligned) config buffer; err = NULL with
//! errlen = 0 is accepted.
#![no_main]

// The lib crate carries the static library build.rs makes: link it.
use arenagrad_fuzz as _;
use libfuzzer_sys::fuzz_target;

#[cfg(not(no_train_full))]
mod harness {
    use std::ffi::c_char;

    unsafe extern "C" {
        fn parse_args(
            argc: i32,
            argv: *mut *mut c_char,
            cfg: *mut u8,
            err: *mut c_char,
            errlen: usize,
        ) -> i32;
    }

    #[repr(C, align(16))]
    struct Config([u8; 65536]);

    const GUARD: u8 = 0xA5;
    const CFG_USED: usize = 4096;
    /// Compared with slice equality (one memcmp) rather than a byte loop,
    /// which comparison tracing would make slow.
    static GUARDS: [u8; 65536] = [GUARD; 65536];

    fn call(args: &[Vec<u8>], errlen: usize, null_err: bool) -> (i32, Vec<u8>) {
        let mut strings: Vec<Vec<u8>> = Vec::with_capacity(args.len() + 1);
        strings.push(b"train_full\0".to_vec());
        for a in args {
            let mut s = a.clone();
            s.push(0);
            strings.push(s);
        }
        let mut argv: Vec<*mut c_char> = strings
            .iter_mut()
            .map(|s| s.as_mut_ptr() as *mut c_char)
            .collect();
        argv.push(std::ptr::null_mut());
        let mut cfg = Box::new(Config([GUARD; 65536]));
        let mut err = vec![GUARD; 1024];
        let errp = if null_err {
            std::ptr::null_mut()
        } else {
            err.as_mut_ptr() as *mut c_char
        };
        let before: Vec<Vec<u8>> = strings.clone();
        // SAFETY: argv holds argc valid NUL-terminated strings and a final
        // NULL; cfg is 64 KiB (more than struct config) and 16-aligned; err
        // has errlen <= 1024 writable bytes.
        let rc = unsafe {
            parse_args(
                (argv.len() - 1) as i32,
                argv.as_mut_ptr(),
                cfg.0.as_mut_ptr(),
                errp,
                errlen,
            )
        };
        assert!(rc == 0 || rc == 2, "parse_args returned {rc}");
        assert!(
            cfg.0[CFG_USED..] == GUARDS[CFG_USED..],
            "parse_args wrote past the first {CFG_USED} bytes of the config"
        );
        assert!(strings == before, "parse_args modified argv strings");
        if null_err {
            return (rc, Vec::new());
        }
        assert!(
            err[errlen..] == GUARDS[errlen..1024],
            "parse_args wrote past errlen {errlen}"
        );
        let nul = err[..errlen].iter().position(|&b| b == 0);
        assert!(
            nul.is_some(),
            "error message not NUL-terminated in {errlen} bytes"
        );
        let msg = err[..nul.unwrap()].to_vec();
        if rc == 0 {
            assert!(msg.is_empty(), "success with a message");
        } else if errlen > 1 {
            assert!(!msg.is_empty(), "failure without a message");
        }
        (rc, msg)
    }

    pub fn check(data: &[u8]) {
        let args: Vec<Vec<u8>> = data
            .split(|&b| b == 0)
            .take(64)
            .map(|s| s.to_vec())
            .collect();
        let (rc, msg) = call(&args, 512, false);
        let small = 1 + data.len() % 40;
        let (rc2, msg2) = call(&args, small, false);
        assert_eq!(rc, rc2, "result depends on the error buffer size");
        assert!(msg.starts_with(&msg2), "truncated message differs");
        let (rc3, _) = call(&args, 0, true);
        assert_eq!(rc, rc3, "result depends on err being NULL");
    }
}

fuzz_target!(|data: &[u8]| {
    #[cfg(not(no_train_full))]
    harness::check(data);
    #[cfg(no_train_full)]
    let _ = data;
});
