//! Which GEMM kernels to run: a pure function of the CPU's features, the
//! BLAS's own choice and what the user asked for, so it can be tested with
//! any CPU and any BLAS as inputs. No timing: the choice never depends on
//! the machine's load.
//!
//! Why it exists: a DYNAMIC_ARCH OpenBLAS picks its kernel family from the
//! CPU model at load, and an OpenBLAS older than the CPU falls back to its
//! SSE3 kernels (Debian's 0.3.21 calls a family 6 model 207 Xeon with
//! AVX-512 "Prescott", and runs 3-4x slower than with its SkylakeX
//! kernels). The features the CPU reports are the better guide.

/// The widest vector instruction set a CPU (or a kernel family) uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Isa {
    /// SSE2/SSE3 era (and anything not x86).
    Sse,
    Avx,
    /// AVX2 with FMA.
    Avx2,
    /// AVX-512 F, BW, VL, DQ and CD (what OpenBLAS's SkylakeX kernels use).
    Avx512,
}

impl Isa {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Isa::Sse => "SSE",
            Isa::Avx => "AVX",
            Isa::Avx2 => "AVX2",
            Isa::Avx512 => "AVX-512",
        }
    }
}

/// What the CPU reports through CPUID (and the OS enables).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cpu {
    pub x86: bool,
    pub amd: bool,
    pub avx: bool,
    pub avx2: bool,
    pub fma: bool,
    pub avx512: bool,
}

impl Cpu {
    pub(crate) fn isa(&self) -> Isa {
        if !self.x86 {
            Isa::Sse
        } else if self.avx512 && self.avx2 && self.fma {
            Isa::Avx512
        } else if self.avx2 && self.fma {
            Isa::Avx2
        } else if self.avx {
            Isa::Avx
        } else {
            Isa::Sse
        }
    }

    /// The OpenBLAS kernel family measured fastest on the step's products
    /// for this class of CPU (see docs/benchmarks.md): SkylakeX on AVX-512
    /// (Cooperlake's sgemm is no faster), Zen on AMD and Haswell on Intel
    /// with AVX2, Sandybridge with AVX only.
    pub(crate) fn best_core(&self) -> Option<&'static str> {
        match self.isa() {
            Isa::Avx512 => Some("SkylakeX"),
            Isa::Avx2 if self.amd => Some("Zen"),
            Isa::Avx2 => Some("Haswell"),
            Isa::Avx => Some("Sandybridge"),
            Isa::Sse => None,
        }
    }
}

/// The instruction set an x86 OpenBLAS kernel family (as OpenBLAS names
/// it, any case) needs; None for names this table does not know.
pub(crate) fn core_isa(core: &str) -> Option<Isa> {
    let c = core.to_ascii_lowercase();
    Some(match c.as_str() {
        "skylakex" | "cooperlake" | "sapphirerapids" => Isa::Avx512,
        "haswell" | "zen" | "excavator" => Isa::Avx2,
        "sandybridge" | "bulldozer" | "piledriver" | "steamroller" => Isa::Avx,
        "prescott" | "core2" | "penryn" | "dunnington" | "nehalem" | "atom" | "nano"
        | "barcelona" | "opteron" | "opteron_sse3" | "bobcat" | "katmai" | "coppermine"
        | "northwood" | "banias" | "athlon" => Isa::Sse,
        _ => return None,
    })
}

/// What the BLAS in the process says about itself.
#[derive(Clone, Copy)]
pub(crate) struct Blas<'a> {
    /// The kernel family it chose ("Prescott"), None if it does not say.
    pub core: Option<&'a str>,
    /// It can switch kernel families (a DYNAMIC_ARCH OpenBLAS exporting
    /// its init and quit functions).
    pub can_switch: bool,
    /// Whether it was built with a given kernel family.
    pub has_core: &'a dyn Fn(&str) -> bool,
}

/// What the user set, read from the environment by the caller.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct User<'a> {
    /// `OPENBLAS_CORETYPE`: OpenBLAS already obeyed it; never overridden.
    pub openblas_coretype: Option<&'a str>,
    /// `AG_BLAS_CORE`: `auto` (or unset) lets arenagrad choose, `asis`
    /// keeps OpenBLAS's choice, a family name forces that family.
    pub ag_blas_core: Option<&'a str>,
}

/// What to do with the BLAS's kernels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Choice {
    /// Leave them; the reason says why.
    Keep(&'static str),
    /// Re-initialise the BLAS with this kernel family.
    Switch(String),
    /// The kernels are below what the CPU supports and this BLAS cannot
    /// change them: the user should set `OPENBLAS_CORETYPE=<family>`.
    CannotFix { running: String, wanted: String },
}

/// The decision. Deterministic in its inputs.
pub(crate) fn decide(cpu: &Cpu, blas: &Blas<'_>, user: &User<'_>) -> Choice {
    if user.openblas_coretype.is_some() {
        return Choice::Keep("OPENBLAS_CORETYPE set by the user");
    }
    let Some(running) = blas.core else {
        return Choice::Keep("the BLAS does not report its kernels");
    };
    let forced = match user.ag_blas_core {
        None => None,
        Some(v) if v.is_empty() || v.eq_ignore_ascii_case("auto") => None,
        Some(v) if v.eq_ignore_ascii_case("asis") => {
            return Choice::Keep("AG_BLAS_CORE=asis");
        }
        Some(v) => Some(v),
    };
    let wanted: String = match forced {
        Some(v) => {
            // A family the CPU cannot run would die on an illegal
            // instruction: refuse it.
            match core_isa(v) {
                Some(isa) if isa <= cpu.isa() => {}
                _ => return Choice::Keep("AG_BLAS_CORE names a family this CPU cannot run"),
            }
            if v.eq_ignore_ascii_case(running) {
                return Choice::Keep("AG_BLAS_CORE already in use");
            }
            v.to_string()
        }
        None => {
            let Some(best) = cpu.best_core() else {
                return Choice::Keep("no faster kernel family for this CPU");
            };
            match core_isa(running) {
                // Same instruction set (Zen on an AMD CPU, Cooperlake on a
                // Cooper Lake): OpenBLAS knows this CPU; trust it.
                Some(isa) if isa >= cpu.isa() => {
                    return Choice::Keep("the BLAS's kernels match the CPU");
                }
                Some(_) => {}
                None => return Choice::Keep("kernel family unknown to arenagrad"),
            }
            best.to_string()
        }
    };
    if blas.can_switch && (blas.has_core)(&wanted) {
        Choice::Switch(wanted)
    } else {
        Choice::CannotFix {
            running: running.to_string(),
            wanted,
        }
    }
}

/// Which library runs the products.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    OpenBlas,
    Mkl,
}

/// The backend for this CPU and `AG_GEMM` (`openblas`, `mkl`, or unset /
/// `auto`); `Err` names what is wrong with the setting (the caller says
/// so and runs OpenBLAS).
///
/// Auto picks MKL on Intel x86 CPUs with AVX2 or AVX-512 when it is
/// installed, unless the user steers OpenBLAS (`steers_openblas`:
/// OPENBLAS_CORETYPE or AG_BLAS_CORE set, which name OpenBLAS kernels): on the step's products it took 0.84x OpenBLAS's time (small
/// preset) and 0.89x (medium) on a Xeon with AVX-512, and it splits rows
/// into the same bits. On AMD CPUs MKL was not measured, so OpenBLAS stays.
/// `mkl` loads MKL; it is called only when the answer depends on it.
pub(crate) fn backend(
    cpu: &Cpu,
    ag_gemm: Option<&str>,
    steers_openblas: bool,
    mkl: impl Fn() -> bool,
) -> Result<Backend, String> {
    match ag_gemm.map(str::trim) {
        Some("openblas") => Ok(Backend::OpenBlas),
        Some("mkl") if mkl() => Ok(Backend::Mkl),
        Some("mkl") => Err("AG_GEMM=mkl but libmkl_rt was not found".into()),
        None | Some("") | Some("auto") => Ok(
            if !steers_openblas && cpu.x86 && !cpu.amd && cpu.isa() >= Isa::Avx2 && mkl() {
                Backend::Mkl
            } else {
                Backend::OpenBlas
            },
        ),
        Some(other) => Err(format!("AG_GEMM={other} is not one of openblas, mkl, auto")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const AVX512_XEON: Cpu = Cpu {
        x86: true,
        amd: false,
        avx: true,
        avx2: true,
        fma: true,
        avx512: true,
    };
    const AVX2_INTEL: Cpu = Cpu {
        avx512: false,
        ..AVX512_XEON
    };
    const EPYC: Cpu = Cpu {
        amd: true,
        ..AVX2_INTEL
    };
    const AVX_ONLY: Cpu = Cpu {
        avx2: false,
        fma: false,
        ..AVX2_INTEL
    };
    const ARM: Cpu = Cpu {
        x86: false,
        amd: false,
        avx: false,
        avx2: false,
        fma: false,
        avx512: false,
    };

    fn all(_: &str) -> bool {
        true
    }
    fn no_sapphire(c: &str) -> bool {
        !c.eq_ignore_ascii_case("sapphirerapids")
    }
    fn blas<'a>(core: &'a str, can_switch: bool) -> Blas<'a> {
        Blas {
            core: Some(core),
            can_switch,
            has_core: &all,
        }
    }
    const AUTO: User<'static> = User {
        openblas_coretype: None,
        ag_blas_core: None,
    };

    #[test]
    fn prescott_on_an_avx512_cpu_switches_to_skylakex() {
        let c = decide(&AVX512_XEON, &blas("Prescott", true), &AUTO);
        assert_eq!(c, Choice::Switch("SkylakeX".into()));
        let auto = User {
            ag_blas_core: Some("auto"),
            ..AUTO
        };
        assert_eq!(decide(&AVX512_XEON, &blas("Prescott", true), &auto), c);
    }

    #[test]
    fn haswell_on_an_avx512_cpu_is_below_and_switches() {
        let c = decide(&AVX512_XEON, &blas("Haswell", true), &AUTO);
        assert_eq!(c, Choice::Switch("SkylakeX".into()));
    }

    #[test]
    fn matching_families_are_kept() {
        for (cpu, core) in [
            (&AVX512_XEON, "SkylakeX"),
            (&AVX512_XEON, "Cooperlake"),
            (&AVX2_INTEL, "Haswell"),
            (&EPYC, "Zen"),
            (&EPYC, "Haswell"),
            (&AVX_ONLY, "Sandybridge"),
        ] {
            assert!(
                matches!(decide(cpu, &blas(core, true), &AUTO), Choice::Keep(_)),
                "{core}"
            );
        }
    }

    #[test]
    fn avx2_cpus_get_their_family() {
        let c = decide(&AVX2_INTEL, &blas("Prescott", true), &AUTO);
        assert_eq!(c, Choice::Switch("Haswell".into()));
        let c = decide(&EPYC, &blas("Prescott", true), &AUTO);
        assert_eq!(c, Choice::Switch("Zen".into()));
        let c = decide(&AVX_ONLY, &blas("Core2", true), &AUTO);
        assert_eq!(c, Choice::Switch("Sandybridge".into()));
    }

    #[test]
    fn the_users_openblas_coretype_is_honoured() {
        // The Makefile's valgrind target sets SandyBridge on purpose.
        let user = User {
            openblas_coretype: Some("SandyBridge"),
            ag_blas_core: Some("SkylakeX"),
        };
        let c = decide(&AVX512_XEON, &blas("Sandybridge", true), &user);
        assert!(matches!(c, Choice::Keep(_)), "{c:?}");
    }

    #[test]
    fn ag_blas_core_forces_or_keeps() {
        let force = |v| User {
            ag_blas_core: Some(v),
            ..AUTO
        };
        let b = blas("SkylakeX", true);
        assert_eq!(
            decide(&AVX512_XEON, &b, &force("haswell")),
            Choice::Switch("haswell".into())
        );
        assert!(matches!(
            decide(&AVX512_XEON, &blas("Prescott", true), &force("asis")),
            Choice::Keep(_)
        ));
        assert!(matches!(
            decide(&AVX512_XEON, &b, &force("skylakex")),
            Choice::Keep(_)
        ));
        // Beyond the CPU, or not a family: refused.
        assert!(matches!(
            decide(&AVX2_INTEL, &blas("Haswell", true), &force("SkylakeX")),
            Choice::Keep(_)
        ));
        assert!(matches!(
            decide(&AVX2_INTEL, &blas("Haswell", true), &force("Cortex-A57")),
            Choice::Keep(_)
        ));
    }

    #[test]
    fn a_blas_that_cannot_switch_says_so() {
        let c = decide(&AVX512_XEON, &blas("Prescott", false), &AUTO);
        assert_eq!(
            c,
            Choice::CannotFix {
                running: "Prescott".into(),
                wanted: "SkylakeX".into()
            }
        );
        // Built without the wanted family (0.3.21 has no SapphireRapids).
        let b = Blas {
            core: Some("Prescott"),
            can_switch: true,
            has_core: &no_sapphire,
        };
        let user = User {
            ag_blas_core: Some("SapphireRapids"),
            ..AUTO
        };
        assert!(matches!(
            decide(&AVX512_XEON, &b, &user),
            Choice::CannotFix { .. }
        ));
    }

    #[test]
    fn silent_or_foreign_blases_are_left_alone() {
        let silent = Blas {
            core: None,
            can_switch: false,
            has_core: &all,
        };
        assert!(matches!(
            decide(&AVX512_XEON, &silent, &AUTO),
            Choice::Keep(_)
        ));
        assert!(matches!(
            decide(&ARM, &blas("NeoverseN1", false), &AUTO),
            Choice::Keep(_)
        ));
        assert!(matches!(
            decide(&AVX512_XEON, &blas("SomethingNew", true), &AUTO),
            Choice::Keep(_)
        ));
    }

    #[test]
    fn mkl_is_picked_on_intel_when_present_and_never_on_amd() {
        let intel = Cpu {
            x86: true,
            avx: true,
            avx2: true,
            fma: true,
            avx512: true,
            ..Cpu::default()
        };
        let amd = Cpu { amd: true, ..intel };
        let old = Cpu {
            avx2: false,
            fma: false,
            avx512: false,
            ..intel
        };
        assert_eq!(backend(&intel, None, false, || true), Ok(Backend::Mkl));
        assert_eq!(
            backend(&intel, Some("auto"), false, || true),
            Ok(Backend::Mkl)
        );
        assert_eq!(
            backend(&intel, None, false, || false),
            Ok(Backend::OpenBlas)
        );
        assert_eq!(backend(&amd, None, false, || true), Ok(Backend::OpenBlas));
        assert_eq!(backend(&old, None, false, || true), Ok(Backend::OpenBlas));
        assert_eq!(
            backend(&Cpu::default(), None, false, || true),
            Ok(Backend::OpenBlas)
        );
        // OPENBLAS_CORETYPE or AG_BLAS_CORE set: OpenBLAS, unless AG_GEMM says.
        assert_eq!(backend(&intel, None, true, || true), Ok(Backend::OpenBlas));
        assert_eq!(
            backend(&intel, Some("mkl"), true, || true),
            Ok(Backend::Mkl)
        );
    }

    #[test]
    fn ag_gemm_forces_a_backend_or_says_what_is_wrong() {
        let amd = Cpu {
            x86: true,
            amd: true,
            avx2: true,
            fma: true,
            ..Cpu::default()
        };
        assert_eq!(backend(&amd, Some("mkl"), false, || true), Ok(Backend::Mkl));
        assert_eq!(
            backend(&amd, Some("openblas"), false, || true),
            Ok(Backend::OpenBlas)
        );
        let missing = backend(&amd, Some("mkl"), false, || false).unwrap_err();
        assert!(missing.contains("not found"), "{missing}");
        let typo = backend(&amd, Some("mlk"), false, || true).unwrap_err();
        assert!(typo.contains("AG_GEMM=mlk"), "{typo}");
    }
}
