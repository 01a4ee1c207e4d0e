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

/// The directories whose CPU quota binds a process in cgroup `path` of a
/// hierarchy mounted at `mount`: its own and every ancestor's, up to the
/// mount (a container with its own cgroup namespace sees itself at the root).
fn cgroup_dirs(mount: &Path, path: &str) -> Vec<std::path::PathBuf> {
    let mut dirs = vec![mount.to_path_buf()];
    let mut dir = mount.to_path_buf();
    for part in path.split('/').filter(|p| !p.is_empty() && *p != "..") {
        dir.push(part);
        dirs.push(dir.clone());
    }
    dirs
}

/// The tightest quota among `dirs`, read by `read` (None: no quota).
fn tightest(dirs: &[std::path::PathBuf], read: impl Fn(&Path) -> Option<usize>) -> Option<usize> {
    dirs.iter().filter_map(|d| read(d)).min()
}

/// The cgroup's CPU quota, v2 then v1, where the process can read it:
/// `root` is where cgroups are mounted, `own` the text of
/// `/proc/self/cgroup`.
fn cgroup_quota(root: &Path, own: &str) -> Option<usize> {
    let mut v2 = None;
    let mut v1 = None;
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.is_empty() {
            v2 = Some(path);
        } else if controllers.split(',').any(|c| c == "cpu") {
            v1 = Some((controllers, path));
        }
    }
    if root.join("cpu.max").exists() {
        let max = |d: &Path| from_cpu_max(&std::fs::read_to_string(d.join("cpu.max")).ok()?);
        return tightest(&cgroup_dirs(root, v2.unwrap_or("/")), max);
    }
    let (controllers, path) = v1.unwrap_or(("cpu", "/"));
    let mount = [controllers, "cpu", "cpu,cpuacct"]
        .iter()
        .map(|m| root.join(m))
        .find(|m| m.join("cpu.cfs_quota_us").exists())?;
    let cfs = |d: &Path| {
        let read = |file: &str| -> Option<i64> {
            std::fs::read_to_string(d.join(file))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        from_quota(read("cpu.cfs_quota_us")?, read("cpu.cfs_period_us")?)
    };
    tightest(&cgroup_dirs(&mount, path), cfs)
}

/// CPUs the gateway is given: those it may run on, within the cgroup's quota.
pub fn given() -> usize {
    let on = std::thread::available_parallelism().map_or(1, usize::from);
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    match cgroup_quota(Path::new("/sys/fs/cgroup"), &own) {
        Some(quota) => on.min(quota),
        None => on,
    }
}

#[cfg(test)]
mod tests;
