"""The trainers' rendezvous on one host (--init portfile:PATH): rank 0's store binds a port of the kernel's
choosing and writes it where the others read it, so no port picked ahead can be taken before it is bound."""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path

import pytest
import torch.distributed as torch_dist

from graphtrain.runtime.train.dist import port_file_store


@pytest.mark.timeout(60)
def test_rank_0_serves_the_port_it_wrote_and_the_others_find_it(tmp_path: Path) -> None:
    path = tmp_path / "rendezvous.port"
    found: dict[str, torch_dist.TCPStore] = {}
    other = threading.Thread(
        target=lambda: found.update(s=port_file_store(path, 1, 2, dt.timedelta(seconds=30)))
    )
    other.start()  # before rank 0: it waits for the file
    master = port_file_store(path, 0, 2, dt.timedelta(seconds=30))
    other.join(30)
    assert int(path.read_text()) == master.port > 0
    assert not path.with_name(path.name + ".partial").exists()
    found["s"].set("from rank 1", "seen")
    assert master.get("from rank 1") == b"seen"


def test_a_rank_without_the_file_gives_up_at_its_deadline_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "rendezvous.port"
    with pytest.raises(TimeoutError, match="rendezvous.port"):
        port_file_store(path, 1, 2, dt.timedelta(seconds=0.2))
