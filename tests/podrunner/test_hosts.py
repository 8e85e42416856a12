"""The runner's hosts file is rewritten in place: a running pod resolves a recreated pod's new address."""

from __future__ import annotations

import os
from pathlib import Path

from tests.podrunner.pods import PodRun
from tests.podrunner.runner import PodRunner

NAME = "s-1.s.ns.svc"


def test_a_rewritten_hosts_file_holds_only_the_new_names_in_the_same_inode(tmp_path: Path) -> None:
    runner = object.__new__(PodRunner)  # _hosts uses nothing of the runner's API or threads
    run = PodRun("ns", "trainer-0", "uid", "127.9.0.2", tmp_path, {"spec": {"hostname": "trainer-0"}}, [])
    runner._hosts(run, [("127.9.0.3", NAME), ("127.9.0.4", "s-0.s.ns.svc")])  # noqa: SLF001
    inode = os.stat(tmp_path / "hosts").st_ino
    runner._hosts(run, [("127.9.0.7", NAME)])  # noqa: SLF001 - the pod recreated at a new address
    text = (tmp_path / "hosts").read_text()
    assert text == run.hosts
    assert [line.split("\t")[0] for line in text.splitlines() if line.endswith(NAME)] == ["127.9.0.7"]
    assert "s-0.s.ns.svc" not in text
    assert os.stat(tmp_path / "hosts").st_ino == inode  # bind-mounted files must keep their inode
