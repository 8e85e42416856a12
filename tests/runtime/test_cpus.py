"""runtime/cpus.py: a process' cores from its affinity and cgroup quota, and how a host's cores are
shared out to trainers' torch threads (pure functions on fake cgroup files; one real cgroup)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from graphtrain.runtime import cpus


def reader(files: dict[str, str]):
    return lambda rel: files.get(rel)


def test_a_v2_quota_is_read_as_cores_and_the_least_along_the_ancestors_wins() -> None:
    files = {"kubepods/pod1/cpu.max": "250000 100000\n", "kubepods/cpu.max": "150000 100000\n"}
    assert cpus.quota_cores("0::/kubepods/pod1\n", reader(files)) == pytest.approx(1.5)
    assert cpus.quota_cores("0::/kubepods/pod1\n", reader({"kubepods/pod1/cpu.max": "50000 100000"})) == 0.5


def test_no_quota_is_none() -> None:
    assert cpus.quota_cores("0::/a\n", reader({"a/cpu.max": "max 100000\n"})) is None
    assert cpus.quota_cores("0::/\n", reader({})) is None
    assert cpus.quota_cores("4:cpu,cpuacct:/a\n", reader({"cpu,cpuacct/a/cpu.cfs_quota_us": "-1\n"})) is None
    assert cpus.quota_cores("", reader({})) is None


def test_a_v1_quota_is_read_from_the_cpu_hierarchy() -> None:
    files = {
        "cpu,cpuacct/kubepods/p/cpu.cfs_quota_us": "200000",
        "cpu,cpuacct/kubepods/p/cpu.cfs_period_us": "100000",
    }
    text = "12:memory:/kubepods/p\n4:cpu,cpuacct:/kubepods/p\n"
    assert cpus.quota_cores(text, reader(files)) == 2.0
    # the memory hierarchy's path is not the cpu one's: only the cpu hierarchy is read
    assert cpus.quota_cores("12:memory:/kubepods/p\n", reader(files)) is None


def test_a_container_whose_cgroup_path_is_not_under_the_mount_reads_the_mounts_root() -> None:
    # v1 without a cgroup namespace: /proc/self/cgroup names the host's path, the mount is the container's
    files = {"cpu/cpu.cfs_quota_us": "50000", "cpu/cpu.cfs_period_us": "100000"}
    assert cpus.quota_cores("3:cpu:/docker/0123abcd\n", reader(files)) == 0.5


def test_every_process_on_a_host_gets_a_core_before_a_trainer_gets_two() -> None:
    assert cpus.share_threads(2, trainers=1, servers=1) == 1  # a second thread would spin beside the server
    assert cpus.share_threads(2, trainers=1, servers=0) == 2
    assert cpus.share_threads(16, trainers=2, servers=2) == 7
    assert cpus.share_threads(0.5, trainers=1, servers=1) == 1
    assert cpus.share_threads(2, trainers=4, servers=4) == 1
    assert cpus.share_threads(3.0, trainers=1, servers=0) == 3  # a float quota of whole cores
    assert cpus.share_threads(8, trainers=0, servers=2) == 1


def test_hosts_share_the_machine_evenly_and_each_ranks_threads_follow_its_host() -> None:
    assert cpus.host_threads(2, trainers=1, shards=1) == [1]
    assert cpus.host_threads(16, trainers=2, shards=2) == [7, 7]
    assert cpus.host_threads(16, trainers=4, shards=2, hosts=2) == [
        3,
        3,
        3,
        3,
    ]  # 8 cores a host: 2 trainers, 1 server
    assert cpus.host_threads(16, trainers=3, shards=0, hosts=2) == [4, 8, 4]  # host 0 holds ranks 0 and 2


def test_the_spec_wins_then_the_launcher_then_the_cores() -> None:
    assert cpus.role_threads(3, 1) == 3
    assert cpus.role_threads(None, 2) == 2
    assert 1 <= cpus.role_threads(None, None) <= (os.cpu_count() or 1)


CHILD = "from graphtrain.runtime import cpus; print(cpus.available_cores())"


def test_a_process_in_a_cgroup_with_half_a_core_sees_half_a_core() -> None:
    """A real cgroup (v1 `cpu` or v2 `cpu.max`, as this machine mounts it) with a quota of 0.5 CPU."""
    assert os.geteuid() == 0, "making a cgroup needs root (CI runs as root)"
    v1 = Path("/sys/fs/cgroup/cpu")
    group = (
        v1 if (v1 / "cpu.cfs_quota_us").exists() else Path("/sys/fs/cgroup")
    ) / f"gt-test-{uuid.uuid4().hex[:8]}"
    if group.parent == Path("/sys/fs/cgroup"):  # v2: the cpu controller must be enabled for children
        control = group.parent / "cgroup.subtree_control"
        if "cpu" not in control.read_text().split():
            control.write_text("+cpu")
    group.mkdir()
    try:
        if (group / "cpu.cfs_quota_us").exists():
            (group / "cpu.cfs_quota_us").write_text("50000")
        else:
            (group / "cpu.max").write_text("50000 100000")
        enter = f'echo $$ > {group / "cgroup.procs"} && exec "$0" -c "$1"'
        out = subprocess.run(
            ["sh", "-c", enter, sys.executable, CHILD], capture_output=True, text=True, timeout=60, check=True
        )
        assert float(out.stdout) == pytest.approx(0.5)
    finally:
        group.rmdir()
