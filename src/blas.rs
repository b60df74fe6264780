//! The only caller of BLAS. A safe row-major `sgemm` that checks every
//! length before calling `cblas_sgemm`; under Miri a naive loop stands in.
#![allow(unsafe_code)]

#[cfg(target_os = "macos")]
extern crate accelerate_src as _;
#[cfg(target_os = "linux")]
extern crate openblas_src as _;

mod choice;
#[cfg(all(target_os = "linux", not(miri)))]
mod mkl;
use std::sync::OnceLock;

/// What GEMM runs in this process: settled once, before the library's
/// first product (see [`gemm_info`]).
#[derive(Clone, Debug, Default)]
pub struct GemmInfo {
    /// "OpenBLAS", "MKL", "Accelerate", "naive" (under Miri).
    pub library: String,
    /// The library's version ("0.3.21"), empty if it does not say.
    pub version: String,
    /// The kernel family in use ("SkylakeX"), empty if it does not say.
    pub kernels: String,
    /// What arenagrad did about it, in a few words.
    pub note: String,
    /// The widest instruction set this CPU supports.
    pub cpu_isa: &'static str,
}

static GEMM: OnceLock<GemmInfo> = OnceLock::new();

/// The GEMM in use. The first call (made by the first context, and by
/// [`sgemm`], before any product) picks the library (`choice::backend`:
/// Intel MKL where it is installed on an Intel CPU and the user set no
/// OpenBLAS kernels, else OpenBLAS; `AG_GEMM=openblas|mkl` forces one).
/// For OpenBLAS it runs
/// `choice::decide` and, when a
/// DYNAMIC_ARCH OpenBLAS picked kernels below what the CPU supports (an
/// OpenBLAS older than the CPU falls back to its SSE3 kernels), switches it
/// to the right family. `OPENBLAS_CORETYPE` set by the user is honoured;
/// `AG_BLAS_CORE=asis` keeps OpenBLAS's own choice, `AG_BLAS_CORE=<family>`
/// forces one. When the kernels are too old and cannot be switched, one
/// line on stderr says so, with the fix.
pub fn gemm_info() -> &'static GemmInfo {
    GEMM.get_or_init(settle)
}

fn cpu() -> choice::Cpu {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    {
        use std::arch::is_x86_feature_detected as has;
        // CPUID leaf 0: the vendor string.
        let v = std::arch::x86_64::__cpuid(0);
        // "AuthenticAMD" / "HygonGenuine": ebx holds the first 4 bytes.
        let amd = v.ebx == u32::from_le_bytes(*b"Auth") || v.ebx == u32::from_le_bytes(*b"Hygo");
        choice::Cpu {
            x86: true,
            amd,
            avx: has!("avx"),
            avx2: has!("avx2"),
            fma: has!("fma"),
            avx512: has!("avx512f")
                && has!("avx512bw")
                && has!("avx512vl")
                && has!("avx512dq")
                && has!("avx512cd"),
        }
    }
    #[cfg(not(all(target_arch = "x86_64", not(miri))))]
    choice::Cpu::default()
}

#[cfg(not(all(target_os = "linux", not(miri))))]
fn settle() -> GemmInfo {
    GemmInfo {
        library: if cfg!(miri) { "naive" } else { "Accelerate" }.into(),
        cpu_isa: cpu().isa().name(),
        ..GemmInfo::default()
    }
}

/// The OpenBLAS this crate links, looked up by symbol name, so that a BLAS
/// without some of these functions still links (and just cannot switch).
#[cfg(all(target_os = "linux", not(miri)))]
mod openblas {
    use std::ffi::{CStr, c_char, c_void};

    // Declared inside functions: the header generator reads module-level
    // extern blocks as part of the C API.
    pub(super) fn set_num_threads(n: std::ffi::c_int) {
        unsafe extern "C" {
            fn openblas_set_num_threads(n: std::ffi::c_int);
        }
        // SAFETY: a plain setter exported by libopenblas, which this crate links.
        unsafe { openblas_set_num_threads(n) }
    }

    /// An address inside the OpenBLAS this crate links.
    fn anchor() -> *const c_void {
        unsafe extern "C" {
            fn openblas_set_num_threads(n: std::ffi::c_int);
        }
        openblas_set_num_threads as *const c_void
    }

    /// dlsym in the library that defines `openblas_set_num_threads` (found
    /// with dladdr, so it works when arenagrad itself was loaded with
    /// RTLD_LOCAL), else in the global scope.
    pub(super) fn sym(name: &CStr) -> *mut c_void {
        static HANDLE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        let handle = *HANDLE.get_or_init(|| {
            let mut info: libc::Dl_info = libc::Dl_info {
                dli_fname: std::ptr::null(),
                dli_fbase: std::ptr::null_mut(),
                dli_sname: std::ptr::null(),
                dli_saddr: std::ptr::null_mut(),
            };
            let f = anchor();
            // SAFETY: dladdr only reads the address and fills `info`.
            if unsafe { libc::dladdr(f, &mut info) } != 0 && !info.dli_fname.is_null() {
                // SAFETY: dli_fname is a NUL-terminated path owned by the
                // loader; RTLD_NOLOAD only returns an already-loaded object
                // (a reference we keep for the life of the process).
                let h =
                    unsafe { libc::dlopen(info.dli_fname, libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
                if !h.is_null() {
                    return h as usize;
                }
            }
            libc::RTLD_DEFAULT as usize
        });
        // SAFETY: a valid handle (or RTLD_DEFAULT) and a C string.
        unsafe { libc::dlsym(handle as *mut c_void, name.as_ptr()) }
    }

    /// Calls a `const char *f(void)` by name; None if absent.
    pub(super) fn string(name: &CStr) -> Option<String> {
        let f = sym(name);
        if f.is_null() {
            return None;
        }
        // SAFETY: OpenBLAS's openblas_get_corename/openblas_get_config have
        // this signature and return static NUL-terminated strings.
        let s = unsafe {
            let f: unsafe extern "C" fn() -> *const c_char = std::mem::transmute(f);
            let p = f();
            if p.is_null() {
                return None;
            }
            CStr::from_ptr(p)
        };
        Some(s.to_string_lossy().trim().to_string())
    }

    /// Switches a DYNAMIC_ARCH OpenBLAS to the kernel family `core`.
    ///
    /// SAFETY (the caller's): no BLAS call may be in flight in the process.
    /// arenagrad calls this once, inside the OnceLock that every one of its
    /// products waits for, before its first product. What the switch
    /// changes is what OpenBLAS's load-time init set from the CPU model:
    /// the `gotoblas` table pointer (the quit function clears it, the init
    /// function reads OPENBLAS_CORETYPE, points it at that family's table
    /// and runs the table's own parameter setup). OpenBLAS's work buffers
    /// and its thread server are sized by build-time constants, the same
    /// for every family, and read the table at each call, so the result is
    /// the state OpenBLAS would have had with OPENBLAS_CORETYPE set at load.
    pub(super) unsafe fn switch(core: &str) -> bool {
        let (quit, init) = (sym(c"gotoblas_dynamic_quit"), sym(c"gotoblas_dynamic_init"));
        if quit.is_null() || init.is_null() {
            return false;
        }
        // SAFETY: both are `void f(void)` in OpenBLAS; the environment
        // variable exists only for the duration of the init call, which is
        // the one place OpenBLAS reads it; the caller guarantees no other
        // BLAS call runs meanwhile.
        unsafe {
            let quit: unsafe extern "C" fn() = std::mem::transmute(quit);
            let init: unsafe extern "C" fn() = std::mem::transmute(init);
            quit();
            std::env::set_var("OPENBLAS_CORETYPE", core);
            init();
            std::env::remove_var("OPENBLAS_CORETYPE");
        }
        true
    }
}

/// MKL's sgemm, set once by `settle` when MKL runs the products.
#[cfg(all(target_os = "linux", not(miri)))]
static MKL_SGEMM: OnceLock<mkl::SgemmFn> = OnceLock::new();

#[cfg(all(target_os = "linux", not(miri)))]
fn settle() -> GemmInfo {
    use choice::Choice;
    let cpu = cpu();
    let ag_gemm = std::env::var("AG_GEMM").ok();
    let steers = ["OPENBLAS_CORETYPE", "AG_BLAS_CORE"]
        .iter()
        .any(|k| std::env::var_os(k).is_some());
    let mut refused = None;
    match choice::backend(&cpu, ag_gemm.as_deref(), steers, || mkl::load().is_some()) {
        Ok(choice::Backend::Mkl) => {
            if let Some(m) = mkl::load() {
                let _ = MKL_SGEMM.set(m.sgemm);
                return GemmInfo {
                    library: "MKL".into(),
                    version: m.version.clone(),
                    kernels: String::new(),
                    // Short: the C API's text fields hold 63 bytes.
                    note: "MKL found; AG_GEMM=openblas for OpenBLAS".into(),
                    cpu_isa: cpu.isa().name(),
                };
            }
        }
        Ok(choice::Backend::OpenBlas) => {}
        Err(why) => {
            eprintln!("arenagrad: {why}; running OpenBLAS");
            refused = Some(why);
        }
    }
    let config = openblas::string(c"openblas_get_config").unwrap_or_default();
    // "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Prescott MAX_THREADS=64"
    let mut words = config.split_whitespace();
    let library = words.next().unwrap_or("OpenBLAS").to_string();
    let version = words.next().unwrap_or("").to_string();
    let core = openblas::string(c"openblas_get_corename");
    let has_core = |c: &str| {
        let name = format!("gotoblas_{}\0", c.to_ascii_uppercase());
        std::ffi::CStr::from_bytes_with_nul(name.as_bytes())
            .is_ok_and(|n| !openblas::sym(n).is_null())
    };
    let can_switch = !openblas::sym(c"gotoblas_dynamic_init").is_null()
        && !openblas::sym(c"gotoblas_dynamic_quit").is_null();
    let env = |k: &str| std::env::var(k).ok();
    let (user_core, ag_core) = (env("OPENBLAS_CORETYPE"), env("AG_BLAS_CORE"));
    let user = choice::User {
        openblas_coretype: user_core.as_deref(),
        ag_blas_core: ag_core.as_deref(),
    };
    let blas = choice::Blas {
        core: core.as_deref(),
        can_switch,
        has_core: &has_core,
    };
    let note = match choice::decide(&cpu, &blas, &user) {
        Choice::Keep(why) => why.to_string(),
        Choice::Switch(to) => {
            let from = core.clone().unwrap_or_default();
            // SAFETY: we are inside GEMM's OnceLock, before arenagrad's
            // first product (every product waits for this lock).
            if unsafe { openblas::switch(&to) } {
                format!("switched from {from} (CPU has {})", cpu.isa().name())
            } else {
                "switch failed".to_string()
            }
        }
        Choice::CannotFix { running, wanted } => {
            eprintln!(
                "arenagrad: {library} runs its {running} kernels on a CPU with {} and cannot \
                 switch them; set OPENBLAS_CORETYPE={wanted} for faster products",
                cpu.isa().name()
            );
            format!("{running} kernels below the CPU; set OPENBLAS_CORETYPE={wanted}")
        }
    };
    GemmInfo {
        library,
        version,
        kernels: openblas::string(c"openblas_get_corename").unwrap_or_default(),
        note: match refused {
            Some(why) => format!("{why}; {note}"),
            None => note,
        },
        cpu_isa: cpu.isa().name(),
    }
}

/// One row-major matrix operand: `rows x cols` after the optional transpose,
/// stored with leading dimension `ld` (the stored row length).
#[derive(Clone, Copy, Debug)]
pub struct Gemm {
    pub trans_a: bool,
    pub trans_b: bool,
    /// C is m x n, op(A) is m x k, op(B) is k x n.
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
}

impl Gemm {
    /// Dense operands: leading dimensions follow from the shapes.
    pub fn dense(trans_a: bool, trans_b: bool, m: usize, n: usize, k: usize) -> Gemm {
        Gemm {
            trans_a,
            trans_b,
            m,
            n,
            k,
            lda: if trans_a { m } else { k },
            ldb: if trans_b { k } else { n },
            ldc: n,
        }
    }

    fn needed(rows: usize, cols: usize, ld: usize) -> usize {
        (rows - 1) * ld + cols
    }
}

/// C = alpha * op(A) @ op(B) + beta * C, all row-major.
/// Panics (a bug, caught by the FFI guard) if a slice is too short or a
/// dimension does not fit in i32; callers validate shapes first.
pub fn sgemm(g: Gemm, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) {
    let (ar, ac) = if g.trans_a { (g.k, g.m) } else { (g.m, g.k) };
    let (br, bc) = if g.trans_b { (g.n, g.k) } else { (g.k, g.n) };
    assert!(g.m > 0 && g.n > 0 && g.k > 0, "sgemm: zero dimension");
    assert!(
        g.lda >= ac && g.ldb >= bc && g.ldc >= g.n,
        "sgemm: leading dimension too small"
    );
    assert!(a.len() >= Gemm::needed(ar, ac, g.lda), "sgemm: A too short");
    assert!(b.len() >= Gemm::needed(br, bc, g.ldb), "sgemm: B too short");
    assert!(
        c.len() >= Gemm::needed(g.m, g.n, g.ldc),
        "sgemm: C too short"
    );
    let fits = |x: usize| i32::try_from(x).is_ok();
    assert!(
        [g.m, g.n, g.k, g.lda, g.ldb, g.ldc].into_iter().all(fits),
        "sgemm: dimension exceeds i32"
    );
    #[cfg(feature = "trace")]
    let t0 = std::time::Instant::now();
    sgemm_impl(g, alpha, a, b, beta, c);
    #[cfg(feature = "trace")]
    trace::record(g, t0.elapsed());
}

/// The profiler lives in `crate::trace`; ops still reach it as `blas::trace`.
#[cfg(feature = "trace")]
pub use crate::trace;

/// Sets how many threads OpenBLAS itself uses (process-wide). arenagrad
/// runs it single-threaded and splits large products across its own
/// worker instead (see `pool.rs`), so that only one set of threads ever
/// competes for the cores. No-op where the BLAS has no such control.
pub fn set_blas_threads(n: usize) {
    gemm_info();
    #[cfg(all(target_os = "linux", not(miri)))]
    {
        let n = std::ffi::c_int::try_from(n.max(1)).unwrap_or(1);
        openblas::set_num_threads(n)
    }
    #[cfg(not(all(target_os = "linux", not(miri))))]
    let _ = n;
}

/// Products with at least this many multiply-adds are split in two halves
/// (by rows or columns of C) across the pool; smaller ones gain nothing
/// from a second thread (measured: the tiny preset's 5-23 us calls).
pub(crate) const SPLIT_MIN_MACS: usize = 1 << 22;

/// `sgemm`, split in two when the product is large (see
/// [`split_rows_of_c`]), the halves on two threads when `pool` is given.
pub(crate) fn sgemm_on(
    pool: Option<&crate::pool::Pool>,
    g: Gemm,
    alpha: f32,
    a: &[f32],
    b: &[f32],
    beta: f32,
    c: &mut [f32],
) {
    split_rows_of_c(pool, g, a, c, |g, a, c| sgemm(g, alpha, a, b, beta, c));
}

/// For benchmarks (feature `trace`): products run as the ops run them on
/// two threads, split by rows across a worker when large ([`sgemm_on`]),
/// so a bench can time a step's products as the step runs them.
#[cfg(feature = "trace")]
pub struct SplitProducts(crate::pool::Pool);

#[cfg(feature = "trace")]
impl SplitProducts {
    /// None if the worker thread cannot be started.
    pub fn new() -> Option<SplitProducts> {
        crate::pool::Pool::new().map(SplitProducts)
    }

    /// `sgemm`, split as [`sgemm_on`] splits it.
    pub fn sgemm(&self, g: Gemm, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) {
        sgemm_on(Some(&self.0), g, alpha, a, b, beta, c)
    }
}

/// C = A @ B + bias (bias broadcast over the rows of C, which it first
/// fills), split like [`sgemm_on`]: each thread fills the rows it then
/// multiplies into, while they are still in its cache.
pub(crate) fn sgemm_bias_on(
    pool: Option<&crate::pool::Pool>,
    g: Gemm,
    a: &[f32],
    b: &[f32],
    bias: &[f32],
    c: &mut [f32],
) {
    split_rows_of_c(pool, g, a, c, |g, a, c| {
        for row in c.chunks_mut(g.ldc).take(g.m) {
            row[..g.n].copy_from_slice(&bias[..g.n]);
        }
        sgemm(g, 1.0, a, b, 1.0, c)
    });
}

/// Runs `product` on the whole of C, or, when the product is large, on its
/// two row halves (with the rows of op(A) they need): across the pool when
/// one is given, else one after the other. OpenBLAS's sums for a row of C
/// depend on how many rows the call has (measured: a 1024-row product and
/// its two 512-row halves differ in about 1% of the elements), so the
/// split depends on the shape alone and one thread gives the same bits as
/// two.
fn split_rows_of_c(
    pool: Option<&crate::pool::Pool>,
    g: Gemm,
    a: &[f32],
    c: &mut [f32],
    product: impl Fn(Gemm, &[f32], &mut [f32]) + Sync,
) {
    if g.m * g.n * g.k < SPLIT_MIN_MACS || g.m < 64 {
        return product(g, a, c);
    }
    #[cfg(feature = "trace")]
    let _logical = trace::Logical::new(g);
    // Split the rows of C (and of op(A)): two disjoint row blocks. Column
    // splits would interleave in memory, so even wide, short products split
    // by rows (32+ rows per half stay efficient GEMMs).
    let h = g.m / 2;
    let a_off = if g.trans_a { h } else { h * g.lda };
    let (c0, c1) = c.split_at_mut(h * g.ldc);
    let (g0, g1) = (Gemm { m: h, ..g }, Gemm { m: g.m - h, ..g });
    let product = &product;
    match pool {
        Some(pool) => pool.join(|| product(g1, &a[a_off..], c1), || product(g0, a, c0)),
        None => {
            product(g0, a, c0);
            product(g1, &a[a_off..], c1);
        }
    }
}

#[cfg(not(miri))]
fn sgemm_impl(g: Gemm, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) {
    use cblas::{Layout, Transpose};
    // The kernels are settled before the first product (one atomic load
    // after that).
    gemm_info();
    #[cfg(target_os = "linux")]
    if let Some(&f) = MKL_SGEMM.get() {
        let t = |x: bool| if x { 112 } else { 111 };
        // SAFETY: as below (the same checked lengths and dimensions);
        // 101 = row-major, 111/112 = no transpose/transpose in the CBLAS
        // enums MKL shares.
        unsafe {
            f(
                101,
                t(g.trans_a),
                t(g.trans_b),
                g.m as i32,
                g.n as i32,
                g.k as i32,
                alpha,
                a.as_ptr(),
                g.lda as i32,
                b.as_ptr(),
                g.ldb as i32,
                beta,
                c.as_mut_ptr(),
                g.ldc as i32,
            )
        }
        return;
    }
    let t = |x: bool| {
        if x {
            Transpose::Ordinary
        } else {
            Transpose::None
        }
    };
    // SAFETY: every slice was checked above to cover the region BLAS reads or
    // writes for these dimensions and leading dimensions, all of which fit in
    // i32; C does not alias A or B (a &mut and & cannot overlap).
    unsafe {
        cblas::sgemm(
            Layout::RowMajor,
            t(g.trans_a),
            t(g.trans_b),
            g.m as i32,
            g.n as i32,
            g.k as i32,
            alpha,
            a,
            g.lda as i32,
            b,
            g.ldb as i32,
            beta,
            c,
            g.ldc as i32,
        )
    }
}

#[cfg(miri)]
fn sgemm_impl(g: Gemm, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) {
    naive_sgemm(g, alpha, a, b, beta, c)
}

/// Reference triple loop, for tests and Miri.
pub fn naive_sgemm(g: Gemm, alpha: f32, a: &[f32], b: &[f32], beta: f32, c: &mut [f32]) {
    for i in 0..g.m {
        for j in 0..g.n {
            let mut acc = 0.0f64;
            for p in 0..g.k {
                let av = if g.trans_a {
                    a[p * g.lda + i]
                } else {
                    a[i * g.lda + p]
                };
                let bv = if g.trans_b {
                    b[j * g.ldb + p]
                } else {
                    b[p * g.ldb + j]
                };
                acc += av as f64 * bv as f64;
            }
            let cv = &mut c[i * g.ldc + j];
            *cv = alpha * acc as f32 + if beta == 0.0 { 0.0 } else { beta * *cv };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1664525).wrapping_add(1013904223);
                (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5
            })
            .collect()
    }

    #[test]
    fn matches_naive_for_all_transposes_and_odd_sizes() {
        for &(m, n, k) in &[(1, 1, 1), (3, 5, 7), (17, 1, 9), (8, 32, 16), (5, 3, 1)] {
            for ta in [false, true] {
                for tb in [false, true] {
                    let g = Gemm::dense(ta, tb, m, n, k);
                    let a = lcg(m * k, 1);
                    let b = lcg(k * n, 2);
                    let mut c1 = lcg(m * n, 3);
                    let mut c2 = c1.clone();
                    sgemm(g, 0.7, &a, &b, 0.5, &mut c1);
                    naive_sgemm(g, 0.7, &a, &b, 0.5, &mut c2);
                    let num: f32 = c1.iter().zip(&c2).map(|(x, y)| (x - y) * (x - y)).sum();
                    let den: f32 = c2.iter().map(|y| y * y).sum::<f32>().max(1e-12);
                    assert!(
                        num / den < 1e-7,
                        "nmse {} for {m}x{n}x{k} ta={ta} tb={tb}",
                        num / den
                    );
                }
            }
        }
    }

    #[test]
    #[cfg_attr(miri, ignore)] // the worker is off under Miri, and the sizes are slow there
    fn split_products_match_naive() {
        // As a context does: OpenBLAS's own threads would split differently.
        set_blas_threads(1);
        let pool = crate::pool::Pool::new().unwrap();
        for &(m, n, k) in &[(200, 300, 100), (77, 128, 1024), (1024, 384, 128)] {
            for ta in [false, true] {
                for tb in [false, true] {
                    let g = Gemm::dense(ta, tb, m, n, k);
                    let (a, b) = (lcg(m * k, 4), lcg(k * n, 5));
                    let mut c1 = lcg(m * n, 6);
                    let (mut c2, mut c3) = (c1.clone(), c1.clone());
                    sgemm_on(Some(&pool), g, 1.0, &a, &b, 1.0, &mut c1);
                    naive_sgemm(g, 1.0, &a, &b, 1.0, &mut c2);
                    let num: f32 = c1.iter().zip(&c2).map(|(x, y)| (x - y) * (x - y)).sum();
                    let den: f32 = c2.iter().map(|y| y * y).sum();
                    assert!(num / den < 1e-7, "{m}x{n}x{k} ta={ta} tb={tb}");
                    // One thread, same split: the same bits.
                    sgemm_on(None, g, 1.0, &a, &b, 1.0, &mut c3);
                    assert!(c1.iter().zip(&c3).all(|(x, y)| x.to_bits() == y.to_bits()));
                    if !ta && !tb {
                        let bias = lcg(n, 7);
                        let (mut d1, mut d2) = (vec![0.0; m * n], vec![1.0; m * n]);
                        sgemm_bias_on(Some(&pool), g, &a, &b, &bias, &mut d1);
                        sgemm_bias_on(None, g, &a, &b, &bias, &mut d2);
                        assert!(d1.iter().zip(&d2).all(|(x, y)| x.to_bits() == y.to_bits()));
                        let mut d3: Vec<f32> = (0..m * n).map(|i| bias[i % n]).collect();
                        sgemm(g, 1.0, &a, &b, 1.0, &mut d3);
                        let num: f32 = d1.iter().zip(&d3).map(|(x, y)| (x - y) * (x - y)).sum();
                        let den: f32 = d3.iter().map(|y| y * y).sum();
                        assert!(num / den < 1e-12, "bias {m}x{n}x{k}");
                    }
                }
            }
        }
    }

    /// Whatever OpenBLAS picked at load, the kernels in use after the
    /// first product are not below the CPU's instruction set (unless the
    /// user chose them, or the BLAS cannot switch and said so).
    #[test]
    #[cfg_attr(miri, ignore)]
    fn kernels_in_use_match_the_cpu() {
        let g = Gemm::dense(false, false, 2, 2, 2);
        let mut c = [0.0; 4];
        sgemm(g, 1.0, &[1.0; 4], &[1.0; 4], 0.0, &mut c);
        assert_eq!(c, [2.0; 4]);
        let info = gemm_info();
        let user_set = ["OPENBLAS_CORETYPE", "AG_BLAS_CORE"]
            .iter()
            .any(|k| std::env::var_os(k).is_some());
        if cfg!(target_os = "linux")
            && !user_set
            && info.library == "OpenBLAS"
            && !info.note.contains("set OPENBLAS_CORETYPE")
        {
            let running = choice::core_isa(&info.kernels);
            let cpu = cpu();
            if cpu.best_core().is_some() {
                assert!(running >= Some(cpu.isa()), "{info:?}");
            }
        }
        assert!(!info.library.is_empty());
    }

    #[test]
    #[should_panic(expected = "too short")]
    fn short_slice_panics_before_blas() {
        let g = Gemm::dense(false, false, 2, 2, 2);
        let mut c = [0.0; 4];
        sgemm(g, 1.0, &[0.0; 3], &[0.0; 4], 0.0, &mut c);
    }
}
