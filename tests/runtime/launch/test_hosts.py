"""Simulated hosts (launch/hosts.py): namespaces on a bridge with shaped links, removed however the block
ends, and a local run spread over them (shard i and trainer i on host i, tcp between hosts)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from graphtrain.runtime.launch import hosts
from graphtrain.runtime.launch.hosts import HostLayout, Link, link_bytes, simulated_hosts
from tests.runtime.launch.test_run import launch, nations, run_in_thread, status

SINK = """
import socket, sys, time
s = socket.socket(); s.bind((sys.argv[1], 5001)); s.listen(1); s.settimeout(20)
c, _ = s.accept(); c.settimeout(20); n = 0; t = time.monotonic()
while True:
    b = c.recv(1 << 20)
    if not b:
        break
    n += len(b)
print(n / (time.monotonic() - t))
"""
SOURCE = """
import socket, sys, time
s = socket.create_connection((sys.argv[1], 5001), timeout=20); b = b"x" * (1 << 20); t = time.monotonic()
while time.monotonic() - t < float(sys.argv[2]):
    s.sendall(b)
s.close()
"""


def test_names_fit_an_interface_and_addresses_stay_in_the_block() -> None:
    layout = HostLayout(249, 4)
    assert all(len(x) <= 15 for x in [layout.bridge, *(layout.veth(k) for k in range(4))])
    assert [layout.address(k) for k in range(4)] == [f"10.249.0.{k}" for k in (2, 3, 4, 5)]
    assert layout.hub == "10.249.0.1"
    assert [layout.shard_host(i) for i in range(6)] == [0, 1, 2, 3, 0, 1]
    assert layout.bind(5) == "tcp://10.249.0.3:0" and layout.rendezvous(29500) == "tcp://10.249.0.2:29500"


def test_each_end_of_a_link_is_shaped_and_a_delay_needs_netem() -> None:
    tc = [c for c in HostLayout(200, 2, Link("100mbit")).setup() if "tc" in c]
    assert len(tc) == 4 and all("tbf" in c and "100mbit" in c for c in tc)  # two hosts, two ends each
    delayed = [c for c in HostLayout(200, 1, Link("1gbit", "0.5ms")).setup() if "tc" in c]
    assert "netem" in delayed[0] and "0.5ms" in delayed[0]  # the host's side sends with the delay
    assert "tbf" in delayed[1]  # the bridge's side only shapes the rate
    assert not [c for c in HostLayout(200, 2, None).setup() if "tc" in c]


def _throughput(layout: HostLayout, seconds: float = 1.5) -> float:
    """Bytes/s from host 1 to host 0 over one TCP connection."""
    sink = subprocess.Popen(
        [*layout.enter(0), layout.hostname(0), sys.executable, "-c", SINK, layout.address(0)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.5)
        src = [*layout.enter(1), layout.hostname(1), sys.executable, "-c", SOURCE, layout.address(0)]
        subprocess.run([*src, str(seconds)], check=True, timeout=30)
        out, _ = sink.communicate(timeout=30)
    finally:
        sink.kill()
    return float(out.strip())


@pytest.mark.timeout(120)
def test_a_link_carries_its_rate_and_the_hosts_go_away_after() -> None:
    with simulated_hosts(2, Link("100mbit")) as layout:
        before = link_bytes(layout)
        rate = _throughput(layout)
        sent = link_bytes(layout)[1][0] - before[1][0]
        name = subprocess.run(
            [*layout.enter(1), layout.hostname(1), "hostname"], capture_output=True, text=True, check=True
        ).stdout.strip()
        namespaces = [layout.namespace(k) for k in range(2)]
    assert 5e6 < rate < 14e6, rate  # 100 Mbit/s is 12.5 MB/s
    assert sent > 5e6  # counted on the bridge's end of host 1's link
    assert name == "gt-host-1"  # its own host name: the shared-memory path keys on it
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert not any(ns in listed for ns in namespaces)
    assert not Path(f"/sys/class/net/{layout.bridge}").exists()


@pytest.mark.timeout(120)
def test_a_failure_inside_still_removes_them_and_leftovers_of_a_free_block_are_cleared() -> None:
    with pytest.raises(RuntimeError, match="inside"), simulated_hosts(1, None) as layout:
        block = layout.block
        raise RuntimeError("inside")
    assert not Path(f"/sys/class/net/gthbr{block}").exists()
    # a killed harness's leftovers (its block is free again once its flock went with it) are cleared by
    # the next holder of the block before it builds its own: here, cleared while this test holds it
    with simulated_hosts(1, None) as layout:
        subprocess.run(["ip", "netns", "add", f"gth{layout.block}-7"], check=True)
        try:
            hosts._leftovers(layout.block)  # what simulated_hosts runs first  # noqa: SLF001
            listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
            assert f"gth{layout.block}-7" not in listed
        finally:
            subprocess.run(["ip", "netns", "delete", f"gth{layout.block}-7"], capture_output=True)


@pytest.mark.timeout(120)
def test_leftovers_of_every_free_block_are_cleared_not_only_of_the_one_taken() -> None:
    """A killed harness's block stayed as it was until a later harness took that very block: with the
    first block busy, a killed second's namespaces and bridge outlived every run after it."""
    spare = hosts.BLOCKS[-1]  # the last a harness takes: free here
    hosts.LOCK_DIR.mkdir(parents=True, exist_ok=True)
    (hosts.LOCK_DIR / f"{spare}.lock").touch()  # as a killed harness leaves it
    subprocess.run(["ip", "netns", "add", f"gth{spare}-7"], check=True)
    try:
        with simulated_hosts(1, None) as layout:
            assert layout.block != spare
            listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert f"gth{spare}-7" not in listed
    finally:
        subprocess.run(["ip", "netns", "delete", f"gth{spare}-7"], capture_output=True)


@pytest.mark.timeout(300)
def test_a_training_runs_across_two_hosts(tmp_path: Path) -> None:
    doc = nations(epochs=2)
    with simulated_hosts(2, Link("1gbit")) as layout:
        run = launch(doc, tmp_path / "run")
        run.hosts = layout
        before = link_bytes(layout)
        result = run.run()
        after = link_bytes(layout)
    assert result["test_mrr"] > 0.2, result
    for k in range(2):  # each host's trainer pulled from the other host's shard, over the link
        assert after[k][0] - before[k][0] > 100_000, (k, before, after)
    logs = tmp_path / "run" / "logs"
    assert "Traceback" not in (logs / "trainer-1.log").read_text()
    assert hosts.LOCK_DIR.is_dir()


def test_faults_are_iptables_rules_in_the_hosts_namespaces() -> None:
    layout = HostLayout(249, 2)
    (loss,) = layout.lossy(1, 0.01)
    assert loss[:4] == ["ip", "netns", "exec", "gth249-1"] and "iptables" in loss
    assert loss[loss.index("INPUT") :] == ["INPUT", "-i", "eth0", "-m", "statistic", "--mode", "random"] + [
        "--probability",
        "0.01",
        "-j",
        "DROP",
    ]
    cut, heal = layout.cut(0, 1), layout.cut(0, 1, on=False)
    # each host drops what comes from the other; healing deletes the very rules the cut inserted
    assert [c[3] for c in cut] == ["gth249-0", "gth249-1"]
    assert cut[0][-4:-2] == ["-s", "10.249.0.3"] and cut[1][-4:-2] == ["-s", "10.249.0.2"]
    assert [c[c.index("INPUT") - 1] for c in cut] == ["-I", "-I"]
    assert [c[c.index("INPUT") - 1] for c in heal] == ["-D", "-D"]
    assert [c[c.index("INPUT") :] for c in cut] == [c[c.index("INPUT") :] for c in heal]


@pytest.mark.timeout(300)
def test_a_run_across_two_hosts_survives_packet_loss_and_a_cut_between_them(tmp_path: Path) -> None:
    """1 % of the packets lost on every link for the whole run, and the two hosts cut apart for 7 s once
    training reports: the trainer's requests to the other host's shard wait (its log says so past 5 s,
    and when the answer came), nothing fails or restarts, and the run ends as a clean one would. One
    trainer, so that what the cut stops is a shard request: with a peer on the other host the step may
    wait in the gradients' all-reduce instead (gloo's, which logs nothing; seen once in CI)."""
    doc = nations(epochs=6)
    doc["spec"]["trainers"]["replicas"] = 1
    with simulated_hosts(2, Link("1gbit")) as layout:
        hosts.apply([c for k in range(2) for c in layout.lossy(k, 0.01)])
        run = launch(doc, tmp_path / "run")
        run.hosts = layout
        thread, out = run_in_thread(run)
        deadline = time.monotonic() + 120
        while not (run.run_dir / "progress.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        hosts.apply(layout.cut(0, 1))
        time.sleep(7.0)
        hosts.apply(layout.cut(0, 1, on=False))
        thread.join(timeout=180)
        assert not thread.is_alive(), "the run did not end"
    assert "error" not in out, out
    assert out["result"]["test_mrr"] > 0.2, out
    st = status(run.run_dir)
    assert st["phase"] == "Succeeded" and st["restarts"] == 0
    logs = (run.run_dir / "logs" / "trainer-0.log").read_text()
    assert "[kvstore] waiting 5 s for shard 1 " in logs and "[kvstore] answered after " in logs, logs[-2000:]


def test_the_host_bench_refuses_a_bad_rate_before_it_calibrates() -> None:
    """bench/hosts.py --rate: read by the plan's prediction after each run, and once by tc; a typo was
    said after the dataset's fetch and a minute's calibration (as root), or after the first run."""
    bench = Path(__file__).parents[3] / "bench" / "hosts.py"
    done = subprocess.run(
        [sys.executable, str(bench), "--rate", "fast"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert done.stderr == "bench/hosts.py: --rate 'fast' is not a rate such as '1gbit' or '100mbit'\n"
