//! Unit tests of `cpus`.

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
    assert_eq!(cgroup_quota(dir.path(), "1:cpu:/\n"), Some(3));
    assert_eq!(
        cgroup_quota(dir.path(), ""),
        Some(3),
        "no cgroup file: the mount's own"
    );
    std::fs::write(dir.path().join("cpu.max"), "max 100000\n").unwrap();
    assert_eq!(cgroup_quota(dir.path(), "0::/\n"), None, "v2 first");
}

#[test]
fn the_process_own_cgroup_and_its_ancestors_count() {
    // v1, as a host without cgroup namespaces shows it: the quota is
    // on the process's own cgroup, and a parent's may be tighter.
    let dir = tempfile::tempdir().unwrap();
    let own = dir.path().join("cpu,cpuacct/kubepods/pod1");
    std::fs::create_dir_all(&own).unwrap();
    for (d, quota) in [
        (own.clone(), "400000"),
        (own.parent().unwrap().to_path_buf(), "150000"),
    ] {
        std::fs::write(d.join("cpu.cfs_quota_us"), quota).unwrap();
        std::fs::write(d.join("cpu.cfs_period_us"), "100000").unwrap();
    }
    std::fs::write(dir.path().join("cpu,cpuacct/cpu.cfs_quota_us"), "-1").unwrap();
    std::fs::write(dir.path().join("cpu,cpuacct/cpu.cfs_period_us"), "100000").unwrap();
    let cgroup = "5:cpu,cpuacct:/kubepods/pod1\n4:memory:/kubepods/pod1\n";
    assert_eq!(cgroup_quota(dir.path(), cgroup), Some(2));
    // v2: the own cgroup's cpu.max; a path the mount does not show
    // (another namespace) leaves the mount's own.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("system.slice/gw.service")).unwrap();
    std::fs::write(dir.path().join("cpu.max"), "max 100000").unwrap();
    std::fs::write(
        dir.path().join("system.slice/gw.service/cpu.max"),
        "100000 100000",
    )
    .unwrap();
    assert_eq!(
        cgroup_quota(dir.path(), "0::/system.slice/gw.service\n"),
        Some(1)
    );
    assert_eq!(cgroup_quota(dir.path(), "0::/elsewhere\n"), None);
}
