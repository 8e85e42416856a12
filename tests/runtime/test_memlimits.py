"""The memory bound the input checks compare with: the least of the machine's memory, the cgroup's
memory.max and RLIMIT_AS, named in the refusal. Before it, the checks compared with the machine's memory
alone, and a pod's partition Job was killed by the kernel with no message."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

from graphtrain.runtime import memlimits

GiB = 1 << 30


def test_the_least_bound_is_named() -> None:
    assert memlimits.least(64 * GiB, None, None) == memlimits.Ceiling(64 * GiB, "this machine's memory")
    assert memlimits.least(64 * GiB, 4 * GiB, None) == memlimits.Ceiling(4 * GiB, "the cgroup memory limit")
    assert memlimits.least(64 * GiB, 4 * GiB, 2 * GiB).source == "the address-space limit"
    assert memlimits.least(64 * GiB, 128 * GiB, None).source == "this machine's memory"  # a limit above it
    assert memlimits.least(64 * GiB, 64 * GiB, None).source == "this machine's memory"  # a tie


def test_cgroup_limit_reads_memory_max(tmp_path: Path) -> None:
    path = tmp_path / "memory.max"
    path.write_text("1073741824\n")
    assert memlimits.cgroup_limit(path) == GiB
    path.write_text("max\n")
    assert memlimits.cgroup_limit(path) is None
    assert memlimits.cgroup_limit(tmp_path / "absent") is None


def test_a_graph_beyond_the_address_space_limit_is_refused_before_allocating(tmp_path: Path) -> None:
    """500M nodes need 7.5 GiB of CSR; under `ulimit -v` 6 GiB (below this machine's memory) the check
    names the limit, where numpy's allocation failed after partitioning had started."""
    (tmp_path / "e.tsv").write_text("0\t1\n1\t2\n")

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (6 * GiB, 6 * GiB))

    cmd = [sys.executable, "-m", "graphtrain.runtime.cli", "partition", "--input", str(tmp_path / "e.tsv")]
    cmd += ["--num-nodes", "500000000", "-k", "2", "--out", str(tmp_path / "p")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, preexec_fn=limited)
    assert done.returncode == 1, done.stderr[-2000:]
    assert done.stderr.strip() == (
        "error: graph 'e': num_nodes=500,000,000, num_edges=2 need at least 7.5 GiB, more than the "
        "address-space limit (6.0 GiB)"
    ), done.stderr[-2000:]
    assert not (tmp_path / "p").exists()
