//! How many threads the pool runs: the machine's default, the environment
//! (`AG_NUM_THREADS`), or a call ([`set_threads`]).
//!
//! The default is the physical cores this process may use: the CPUs in
//! its affinity mask, grouped by core so that hyperthread siblings count
//! once, and no more than a cgroup CPU quota allows (a container limited
//! to two CPUs' worth of time gains nothing from sixteen threads but
//! descheduled ones). Every parser here is a pure function of the text it
//! is given, so each edge case is tested without touching the machine.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The most threads the pool starts, whatever is asked (a typo such as
/// `AG_NUM_THREADS=100000` must not try to start 100000 threads).
pub(crate) const MAX_THREADS: usize = 1024;

/// What decided the thread count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadSource {
    /// The default: every physical core of the machine.
    Cores,
    /// The default, bounded by the process's CPU affinity mask.
    Affinity,
    /// The default, bounded by a cgroup CPU quota.
    Cgroup,
    /// `AG_NUM_THREADS`.
    Environment,
    /// [`set_threads`].
    Call,
}

/// The thread count in effect and where it comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadInfo {
    /// Threads a parallel-for uses (the caller included): the setting, or
    /// fewer when the OS refused to start as many.
    pub threads: usize,
    /// What the machine gives this process (see the module comment).
    pub default: usize,
    /// What decided `threads`.
    pub source: ThreadSource,
}

/// An `AG_NUM_THREADS` value, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadCount {
    /// Unset, empty or 0: the default.
    Default,
    /// This many threads (at least 1).
    Exactly(usize),
    /// Not a count: the default, and a message.
    Invalid,
}

/// Parses a thread count: decimal digits, surrounding blanks allowed.
pub fn parse_thread_count(text: &str) -> ThreadCount {
    let t = text.trim();
    if t.is_empty() {
        return ThreadCount::Default;
    }
    if !t.bytes().all(|b| b.is_ascii_digit()) {
        return ThreadCount::Invalid;
    }
    match t.parse::<usize>() {
        Ok(0) => ThreadCount::Default,
        Ok(n) => ThreadCount::Exactly(n),
        Err(_) => ThreadCount::Invalid,
    }
}

/// CPUs a quota of `quota` µs per `period` µs allows, rounded up.
fn quota_cpus(quota: u64, period: u64) -> Option<usize> {
    if quota == 0 || period == 0 {
        return None;
    }
    usize::try_from(quota.div_ceil(period)).ok()
}

/// A cgroup v2 `cpu.max` ("max 100000", "200000 100000"): the CPUs it
/// allows, None when it sets no limit or cannot be read.
pub fn parse_cpu_max(text: &str) -> Option<usize> {
    let mut fields = text.split_whitespace();
    let quota = fields.next()?;
    let period = fields.next().map_or(Some(100_000), |p| p.parse().ok())?;
    if quota == "max" {
        return None;
    }
    quota_cpus(quota.parse().ok()?, period)
}

/// A cgroup v1 quota (`cpu.cfs_quota_us`, -1 for none) and period
/// (`cpu.cfs_period_us`): the CPUs they allow, None when no limit.
pub fn parse_cfs(quota: &str, period: &str) -> Option<usize> {
    let quota: i64 = quota.trim().parse().ok()?;
    let period: u64 = period.trim().parse().ok()?;
    quota_cpus(u64::try_from(quota).ok()?, period)
}

/// A kernel CPU list ("0-3,8,10-11"); empty when it does not parse.
pub fn parse_cpu_list(text: &str) -> Vec<usize> {
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let range = match part.split_once('-') {
            Some((a, b)) => a.trim().parse().ok().zip(b.trim().parse().ok()),
            None => part.trim().parse::<usize>().ok().map(|a| (a, a)),
        };
        match range {
            Some((a, b)) if a <= b && b < 1 << 16 => cpus.extend(a..=b),
            _ => return Vec::new(),
        }
    }
    cpus
}

/// The cgroup paths in `/proc/self/cgroup`: the v2 one ("0::/path") and
/// the v1 one of the `cpu` controller ("4:cpu,cpuacct:/path").
pub fn parse_proc_cgroup(text: &str) -> (Option<String>, Option<String>) {
    let (mut v2, mut v1) = (None, None);
    for line in text.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if id == "0" && controllers.is_empty() {
            v2 = Some(path.to_string());
        } else if controllers.split(',').any(|c| c == "cpu") {
            v1 = Some(path.to_string());
        }
    }
    (v2, v1)
}

/// Physical cores among `cpus`: distinct (package, core) pairs that
/// `topology` reports; the number of CPUs itself when any is unknown.
pub fn count_cores(cpus: &[usize], topology: impl Fn(usize) -> Option<(u32, u32)>) -> usize {
    let mut cores = Vec::with_capacity(cpus.len());
    for &cpu in cpus {
        match topology(cpu) {
            Some(core) => cores.push(core),
            None => return cpus.len(),
        }
    }
    cores.sort_unstable();
    cores.dedup();
    cores.len()
}

/// The default count and what bounded it, from the machine's physical
/// cores, those the affinity mask allows, and a quota in CPUs if any.
pub fn choose_default(
    machine_cores: usize,
    allowed_cores: usize,
    quota: Option<usize>,
) -> (usize, ThreadSource) {
    let allowed = allowed_cores.clamp(1, machine_cores.max(1));
    let (n, source) = if allowed < machine_cores {
        (allowed, ThreadSource::Affinity)
    } else {
        (allowed, ThreadSource::Cores)
    };
    match quota {
        Some(q) if q < n => (q.max(1), ThreadSource::Cgroup),
        _ => (n, source),
    }
}

// ---- reading the machine ----------------------------------------------------

fn read(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn topology(cpu: usize) -> Option<(u32, u32)> {
    let dir = format!("/sys/devices/system/cpu/cpu{cpu}/topology");
    let package = read(format!("{dir}/physical_package_id"))?
        .trim()
        .parse()
        .ok()?;
    let core = read(format!("{dir}/core_id"))?.trim().parse().ok()?;
    Some((package, core))
}

/// The CPUs in this process's affinity mask; None if it cannot be read.
#[cfg(target_os = "linux")]
fn affinity_cpus() -> Option<Vec<usize>> {
    // SAFETY: cpu_set_t is plain bits, so all-zero is a valid value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live cpu_set_t and the size passed is its own.
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return None;
    }
    let bits = 8 * std::mem::size_of_val(&set);
    // SAFETY: CPU_ISSET only reads `set`, and `cpu` is below its size.
    let cpus: Vec<usize> = (0..bits)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect();
    (!cpus.is_empty()).then_some(cpus)
}

#[cfg(not(target_os = "linux"))]
fn affinity_cpus() -> Option<Vec<usize>> {
    None
}

/// The smallest CPU quota of this process's cgroup and its ancestors.
fn cgroup_quota() -> Option<usize> {
    let (v2, v1) = read("/proc/self/cgroup")
        .map(|t| parse_proc_cgroup(&t))
        .unwrap_or_default();
    let mut quotas = Vec::new();
    let ancestors = |root: &str, path: Option<&String>| -> Vec<PathBuf> {
        let mut dir = PathBuf::from(root);
        dir.push(path.map_or("", |p| p.trim_start_matches('/')));
        let mut dirs: Vec<PathBuf> = dir.ancestors().map(Path::to_path_buf).collect();
        dirs.retain(|d| d.starts_with(root));
        dirs
    };
    for dir in ancestors("/sys/fs/cgroup", v2.as_ref()) {
        quotas.extend(read(dir.join("cpu.max")).and_then(|t| parse_cpu_max(&t)));
    }
    for root in ["/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"] {
        for dir in ancestors(root, v1.as_ref()) {
            let quota = read(dir.join("cpu.cfs_quota_us"));
            let period = read(dir.join("cpu.cfs_period_us"));
            quotas.extend(quota.zip(period).and_then(|(q, p)| parse_cfs(&q, &p)));
        }
    }
    quotas.into_iter().min()
}

/// The default thread count and what bounded it (reads the machine; the
/// pool calls it once).
pub fn default_threads() -> (usize, ThreadSource) {
    // Miri isolates the process from the file system: two threads there,
    // enough for the pool's own tests to hand work to a worker.
    if cfg!(miri) {
        return (2, ThreadSource::Cores);
    }
    let online = read("/sys/devices/system/cpu/online")
        .map(|t| parse_cpu_list(&t))
        .filter(|c| !c.is_empty());
    let allowed = affinity_cpus().or_else(|| online.clone());
    let Some(allowed) = allowed else {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        return choose_default(n, n, cgroup_quota());
    };
    let allowed_cores = count_cores(&allowed, topology);
    let machine_cores = online.map_or(allowed_cores, |cpus| count_cores(&cpus, topology));
    choose_default(machine_cores, allowed_cores, cgroup_quota())
}

// ---- the setting --------------------------------------------------------------

struct Settings {
    default: usize,
    default_source: ThreadSource,
    env: Option<usize>,
}

/// Read once, on first use: the environment and the machine.
fn settings() -> &'static Settings {
    static SETTINGS: OnceLock<Settings> = OnceLock::new();
    SETTINGS.get_or_init(|| {
        let (default, default_source) = default_threads();
        let text = std::env::var("AG_NUM_THREADS").unwrap_or_default();
        let env = match parse_thread_count(&text) {
            ThreadCount::Default => None,
            ThreadCount::Exactly(n) => {
                say_if_over(n, default, "AG_NUM_THREADS");
                Some(n.min(MAX_THREADS))
            }
            ThreadCount::Invalid => {
                eprintln!(
                    "arenagrad: AG_NUM_THREADS={text:?} is not a thread count; \
                     using the default ({default})"
                );
                None
            }
        };
        Settings {
            default,
            default_source,
            env,
        }
    })
}

/// Says once per process that `n` threads exceed the machine's `default`.
fn say_if_over(n: usize, default: usize, what: &str) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if n > default && !SAID.swap(true, Ordering::Relaxed) {
        let capped = if n > MAX_THREADS {
            format!(" (capped at {MAX_THREADS})")
        } else {
            String::new()
        };
        eprintln!(
            "arenagrad: {what} asks for {n} threads{capped}, more than the {default} cores \
             this process may use"
        );
    }
}

/// The count set by [`set_threads`]; 0 when none is.
static CALLED: AtomicUsize = AtomicUsize::new(0);

/// Sets the process's thread count (the caller included); 0 goes back to
/// `AG_NUM_THREADS` or the default. It takes effect at the next
/// parallel-for that finds the pool idle, never in the middle of one.
pub fn set_threads(n: usize) {
    if n > 0 {
        say_if_over(n, settings().default, "a call");
    }
    CALLED.store(n.min(MAX_THREADS), Ordering::Relaxed);
}

/// The setting (before any limit the OS set by refusing threads).
pub(super) fn setting() -> ThreadInfo {
    let s = settings();
    let (threads, source) = match (CALLED.load(Ordering::Relaxed), s.env) {
        (0, Some(n)) => (n, ThreadSource::Environment),
        (0, None) => (s.default, s.default_source),
        (n, _) => (n, ThreadSource::Call),
    };
    ThreadInfo {
        threads: threads.clamp(1, MAX_THREADS),
        default: s.default,
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_counts_parse() {
        use ThreadCount::*;
        for (text, want) in [
            ("", Default),
            ("0", Default),
            (" 0 ", Default),
            ("1", Exactly(1)),
            ("16\n", Exactly(16)),
            ("007", Exactly(7)),
            ("5000", Exactly(5000)),
            ("-1", Invalid),
            ("+4", Invalid),
            ("4.0", Invalid),
            ("four", Invalid),
            ("4 4", Invalid),
            ("99999999999999999999999", Invalid),
        ] {
            assert_eq!(parse_thread_count(text), want, "{text:?}");
        }
    }

    #[test]
    fn cgroup_v2_quota_parses() {
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cpu_max("max"), None);
        assert_eq!(parse_cpu_max("200000 100000\n"), Some(2));
        assert_eq!(parse_cpu_max("150000 100000"), Some(2));
        assert_eq!(parse_cpu_max("50000 100000"), Some(1));
        assert_eq!(parse_cpu_max("400000"), Some(4));
        assert_eq!(parse_cpu_max("100000 0"), None);
        assert_eq!(parse_cpu_max(""), None);
        assert_eq!(parse_cpu_max("lots 100000"), None);
    }

    #[test]
    fn cgroup_v1_quota_parses() {
        assert_eq!(parse_cfs("-1\n", "100000\n"), None);
        assert_eq!(parse_cfs("300000", "100000"), Some(3));
        assert_eq!(parse_cfs("250000", "100000"), Some(3));
        assert_eq!(parse_cfs("1000", "100000"), Some(1));
        assert_eq!(parse_cfs("0", "100000"), None);
        assert_eq!(parse_cfs("x", "100000"), None);
        assert_eq!(parse_cfs("100000", ""), None);
    }

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-3,8,10-11\n"), [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpu_list("0"), [0]);
        assert_eq!(parse_cpu_list("0-1"), [0, 1]);
        assert!(parse_cpu_list("").is_empty());
        assert!(parse_cpu_list("3-1").is_empty());
        assert!(parse_cpu_list("a-b").is_empty());
    }

    #[test]
    fn proc_cgroup_parses() {
        let hybrid = "4:memory:/m\n2:cpu,cpuacct:/user/job\n0::/user.slice/job.scope\n";
        assert_eq!(
            parse_proc_cgroup(hybrid),
            (
                Some("/user.slice/job.scope".into()),
                Some("/user/job".into())
            )
        );
        assert_eq!(parse_proc_cgroup("0::/\n"), (Some("/".into()), None));
        assert_eq!(parse_proc_cgroup("1:cpu:/\n"), (None, Some("/".into())));
        assert_eq!(parse_proc_cgroup("garbage\n"), (None, None));
        // `cpuset` is not `cpu`.
        assert_eq!(parse_proc_cgroup("3:cpuset:/x\n"), (None, None));
    }

    #[test]
    fn hyperthread_siblings_count_once() {
        // cpus 0-3 on cores 0-3, cpus 4-7 their siblings, on one package.
        let topo = |cpu: usize| Some((0, (cpu % 4) as u32));
        assert_eq!(count_cores(&[0, 1, 2, 3, 4, 5, 6, 7], topo), 4);
        assert_eq!(count_cores(&[0, 4], topo), 1);
        // Two packages with the same core ids are different cores.
        let two = |cpu: usize| Some(((cpu / 2) as u32, (cpu % 2) as u32));
        assert_eq!(count_cores(&[0, 1, 2, 3], two), 4);
        // Unknown topology: the logical count.
        assert_eq!(count_cores(&[0, 1, 2], |c| (c != 1).then_some((0, 0))), 3);
        assert_eq!(count_cores(&[], topo), 0);
    }

    #[test]
    fn the_default_takes_the_tightest_bound() {
        use ThreadSource::*;
        assert_eq!(choose_default(8, 8, None), (8, Cores));
        assert_eq!(choose_default(8, 4, None), (4, Affinity));
        assert_eq!(choose_default(8, 4, Some(2)), (2, Cgroup));
        assert_eq!(choose_default(8, 4, Some(4)), (4, Affinity));
        assert_eq!(choose_default(8, 8, Some(16)), (8, Cores));
        assert_eq!(choose_default(0, 0, None), (1, Cores));
        assert_eq!(choose_default(2, 2, Some(0)), (1, Cgroup));
    }

    /// Under Miri the count is fixed at 2 (no file system), whatever the
    /// emulated machine says: nothing to check there.
    #[test]
    #[cfg_attr(miri, ignore)]
    fn the_machine_gives_at_least_one_thread() {
        let (n, _) = default_threads();
        let logical = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!((1..=logical).contains(&n), "{n} of {logical}");
    }
}
