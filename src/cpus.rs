//! How many CPUs the gateway is given, for the runtime it picks by default:
//! the CPUs it may run on, within the cgroup's CPU quota (a pod's
//! `resources.limits.cpu`), rounded up. One CPU gets the current-thread
//! runtime (no cross-thread wake-ups: docs/PERFORMANCE.md), more a
//! multi-thread runtime with one worker each.

use std::path::Path;

/// CPUs a quota of `quota` microseconds per `period` allows, rounded up
/// (at least one); `None` when there is no quota.
pub fn from_quota(quota: i64, period: i64) -> Option<usize> {
    if quota <= 0 || period <= 0 {
        return None;
    }
    usize::try_from(quota.div_euclid(period) + i64::from(quota % period != 0))
        .ok()
        .map(|n| n.max(1))
}

/// The quota of cgroup v2's `cpu.max` ("max 100000", or "150000 100000").
pub fn from_cpu_max(text: &str) -> Option<usize> {
    let mut fields = text.split_whitespace();
    let quota = fields.next()?.parse::<i64>().ok()?;
    let period = fields.next().map_or(Ok(100_000), str::parse::<i64>).ok()?;
    from_quota(quota, period)
}

/// The cgroup's CPU quota, v2 then v1, where the process can read it.
fn cgroup_quota(root: &Path) -> Option<usize> {
    if let Ok(text) = std::fs::read_to_string(root.join("cpu.max")) {
        return from_cpu_max(&text);
    }
    let read = |file: &str| -> Option<i64> {
        std::fs::read_to_string(root.join("cpu").join(file))
            .or_else(|_| std::fs::read_to_string(root.join("cpu,cpuacct").join(file)))
            .ok()?
            .trim()
            .parse()
            .ok()
    };
    from_quota(read("cpu.cfs_quota_us")?, read("cpu.cfs_period_us")?)
}

/// CPUs the gateway is given: those it may run on, within the cgroup's quota.
pub fn given() -> usize {
    let on = std::thread::available_parallelism().map_or(1, usize::from);
    match cgroup_quota(Path::new("/sys/fs/cgroup")) {
        Some(quota) => on.min(quota),
        None => on,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotas_round_up_to_whole_cpus() {
        assert_eq!(from_cpu_max("max 100000\n"), None);
        assert_eq!(from_cpu_max("100000 100000"), Some(1));
        assert_eq!(from_cpu_max("50000 100000"), Some(1));
        assert_eq!(from_cpu_max("150000 100000\n"), Some(2));
        assert_eq!(from_cpu_max("400000 100000"), Some(4));
        assert_eq!(from_cpu_max("200000"), Some(2));
        assert_eq!(from_cpu_max(""), None);
        assert_eq!(from_cpu_max("x 1"), None);
        assert_eq!(from_quota(-1, 100_000), None);
        assert_eq!(from_quota(1, 0), None);
    }

    #[test]
    fn a_cgroup_v1_quota_is_read_too() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("cpu")).unwrap();
        std::fs::write(dir.path().join("cpu/cpu.cfs_quota_us"), "250000\n").unwrap();
        std::fs::write(dir.path().join("cpu/cpu.cfs_period_us"), "100000\n").unwrap();
        assert_eq!(cgroup_quota(dir.path()), Some(3));
        std::fs::write(dir.path().join("cpu.max"), "max 100000\n").unwrap();
        assert_eq!(cgroup_quota(dir.path()), None, "v2 first");
    }
}
