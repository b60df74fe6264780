//! What GEMM runs in this process and how it was set up: the library
//! (OpenBLAS or MKL), its kernels, the CPU it runs on, and OpenBLAS's own
//! thread count. Its own room: all of it runs once per process, before
//! the first product; a product only reads which `sgemm` it chose. Its one
//! unsafe call, the OpenBLAS kernel switch, relies on that: it runs inside
//! the `OnceLock` every product waits for.

use super::choice;
#[cfg(all(target_os = "linux", not(miri)))]
use super::{mkl, openblas};
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
/// [`sgemm`](super::sgemm), before any product) picks the library (`choice::backend`:
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

pub(super) fn cpu() -> choice::Cpu {
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

/// MKL's sgemm, set once by `settle` when MKL runs the products.
#[cfg(all(target_os = "linux", not(miri)))]
pub(super) static MKL_SGEMM: OnceLock<mkl::SgemmFn> = OnceLock::new();

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
    // Single-threaded from here on (the pool splits large products), so
    // OpenBLAS's own workers have nothing to do: stop their start-up
    // busy-wait rather than let it take a core from the pool.
    openblas::set_num_threads(1);
    // SAFETY: inside GEMM's OnceLock, before arenagrad's first product,
    // and every OpenBLAS call arenagrad makes is single-threaded.
    unsafe { openblas::stop_workers() };
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
