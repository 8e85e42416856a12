"""Downloads (pinned sha256), .deb extraction, and the fetch -> cache -> verified load path, offline:
a real .deb is built in the test and served from a file:// mirror."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path

import numpy as np
import pytest

from graphtrain.runtime.data import datasets, fetch, store
from graphtrain.runtime.errors import ChecksumError, DataError, FetchError
from tests.runtime.data.fixtures_formats import build_deb, write_wordnet


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "mirror"
    monkeypatch.setenv(fetch.ENV_MIRROR, root.as_uri())
    return root


def publish(mirror: Path, pool_path: str, files: dict[str, bytes]) -> fetch.Package:
    deb = mirror / pool_path
    deb.parent.mkdir(parents=True, exist_ok=True)
    build_deb(deb, files)
    data = deb.read_bytes()
    return fetch.Package(
        name="fake",
        version="1",
        filename=deb.name,
        sha256=hashlib.sha256(data).hexdigest(),
        size=len(data),
        pool_path=pool_path,
    )


def test_download_verifies_and_caches(mirror: Path, tmp_path: Path) -> None:
    pkg = publish(mirror, "pool/main/f/fake/fake_1_all.deb", {"usr/share/x.txt": b"hello"})
    got = fetch.download(pkg, tmp_path / "dl")
    assert got.read_bytes() == (mirror / pkg.pool_path).read_bytes()
    (mirror / pkg.pool_path).unlink()  # served from the cache now
    assert fetch.download(pkg, tmp_path / "dl") == got


def test_wrong_checksum_is_refused_and_nothing_kept(mirror: Path, tmp_path: Path) -> None:
    pkg = dataclasses.replace(publish(mirror, "pool/f/fake_1_all.deb", {"a": b"x"}), sha256="0" * 64)
    with pytest.raises(ChecksumError, match="not the pinned"):
        fetch.download(pkg, tmp_path / "dl")
    assert not any((tmp_path / "dl").iterdir())


def test_corrupt_cached_download_is_fetched_again(mirror: Path, tmp_path: Path) -> None:
    pkg = publish(mirror, "pool/f/fake_1_all.deb", {"a": b"x"})
    (tmp_path / "dl").mkdir()
    (tmp_path / "dl" / pkg.filename).write_bytes(b"truncated")
    assert fetch.download(pkg, tmp_path / "dl").read_bytes() == (mirror / pkg.pool_path).read_bytes()


def test_unreachable_mirror_names_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fetch.ENV_MIRROR, (tmp_path / "nowhere").as_uri())
    with pytest.raises(FetchError, match="could not download wordnet-base"):
        fetch.download(fetch.WORDNET_BASE, tmp_path / "dl")


def test_extract_deb(tmp_path: Path) -> None:
    build_deb(tmp_path / "p.deb", {"usr/share/a.txt": b"A", "usr/share/b.txt": b"B" * 3})
    fetch.extract_deb(tmp_path / "p.deb", {"usr/share/b.txt": tmp_path / "out" / "b"})
    assert (tmp_path / "out" / "b").read_bytes() == b"BBB"
    with pytest.raises(DataError, match="missing"):
        fetch.extract_deb(tmp_path / "p.deb", {"usr/share/c.txt": tmp_path / "c"})
    (tmp_path / "bad.deb").write_bytes(b"garbage")
    with pytest.raises(DataError, match="not a Debian package"):
        fetch.extract_deb(tmp_path / "bad.deb", {})


@pytest.fixture
def fake_wordnet(mirror: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> fetch.Package:
    """The wordnet recipe, pointed at a small synthetic wordnet-base package on the file:// mirror."""
    src = tmp_path / "wn"
    write_wordnet(src)
    files = {f"usr/share/wordnet/{f.name}": f.read_bytes() for f in src.iterdir()}
    files["usr/share/doc/wordnet-base/copyright"] = b"WordNet 3.0 Copyright 2006 by Princeton University."
    pkg = dataclasses.replace(
        publish(mirror, fetch.WORDNET_BASE.pool_path, files),
        name="wordnet-base",
        filename=fetch.WORDNET_BASE.filename,
    )
    monkeypatch.setitem(
        datasets.RECIPES, "wordnet", dataclasses.replace(datasets.RECIPES["wordnet"], packages=(pkg,))
    )
    return pkg


def test_fetch_then_load_with_seeded_split(fake_wordnet: fetch.Package, data_root: Path) -> None:
    path = datasets.fetch("wordnet")
    assert datasets.is_fetched("wordnet")
    manifest = store.read_manifest(path)
    assert manifest["sources"][0]["sha256"] == fake_wordnet.sha256
    g = datasets.load("wordnet")
    assert g.num_nodes == 6 and g.num_classes == 45
    assert {k: int(m.sum()) for k, m in g.masks.items()} == {"train": 4, "val": 1, "test": 1}
    again = datasets.load("wordnet")
    assert all(np.array_equal(g.masks[k], again.masks[k]) for k in g.masks)


def test_changed_cache_file_is_detected(fake_wordnet: fetch.Package, data_root: Path) -> None:
    path = datasets.fetch("wordnet")
    label = path / "label.npy"
    arr = np.load(label)
    arr[0] = 7
    np.save(label, arr)
    with pytest.raises(ChecksumError, match="label.npy"):
        datasets.load("wordnet")


def test_load_without_fetch_and_unknown_names(data_root: Path) -> None:
    with pytest.raises(DataError, match="graphtrain data fetch wordnet"):
        datasets.load("wordnet", auto_fetch=False)
    with pytest.raises(DataError, match="unknown dataset 'cora'"):
        datasets.load("cora")


def test_failed_processing_leaves_no_dataset(
    fake_wordnet: fetch.Package, data_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(pkgs, tmp):  # noqa: ANN001, ANN202
        raise DataError("parser exploded")

    monkeypatch.setitem(
        datasets.RECIPES, "wordnet", dataclasses.replace(datasets.RECIPES["wordnet"], build=broken)
    )
    with pytest.raises(DataError, match="exploded"):
        datasets.fetch("wordnet")
    assert not datasets.dataset_dir("wordnet").exists()


def test_offline_never_downloads_and_says_how_to_pre_seed(
    fake_wordnet: fetch.Package, data_root: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """$GRAPHTRAIN_OFFLINE (the operator's storage.offline): a missing dataset is one line naming it,
    where it was looked for and the command that pre-seeds it; nothing is downloaded. Pre-seeded, it
    loads as before."""
    from typer.testing import CliRunner

    from graphtrain.cli.app import app

    def no_download(pkg: fetch.Package, downloads: Path) -> Path:
        raise AssertionError(f"downloaded {pkg.name} while offline")

    monkeypatch.setenv("GRAPHTRAIN_OFFLINE", "1")
    real_download = fetch.download
    monkeypatch.setattr(fetch, "download", no_download)
    spec = tmp_path / "wn.yaml"
    spec.write_text(
        "apiVersion: graphtrain.io/v1alpha1\nkind: GraphTraining\nmetadata: {name: wn}\n"
        "spec: {graph: {dataset: wordnet}, embeddings: [{name: node, dim: 8}],\n"
        "       model: {nodeEmbedding: node}}\n"
    )
    seeded = tmp_path / "volume" / "data"
    args = ["partition", "--spec", str(spec), "--out", str(tmp_path / "p"), "--data-dir", str(seeded)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, lines
    assert f"dataset 'wordnet' is not in {seeded / 'datasets' / 'wordnet'}" in lines[0]
    assert f"`graphtrain data fetch wordnet --data-dir {seeded}`" in lines[0]

    monkeypatch.delenv("GRAPHTRAIN_OFFLINE")  # pre-seeding, where the registries are reachable
    monkeypatch.setattr(fetch, "download", real_download)
    assert CliRunner().invoke(app, ["data", "fetch", "wordnet", "--data-dir", str(seeded)]).exit_code == 0
    monkeypatch.setenv("GRAPHTRAIN_OFFLINE", "1")
    monkeypatch.setattr(fetch, "download", no_download)
    assert datasets.load("wordnet", seeded).num_nodes == 6
    monkeypatch.setenv("GRAPHTRAIN_OFFLINE", "0")  # "0" is online
    assert not datasets.offline()


# ------------------------------------------------------- mirrors from the machine's apt sources (issue 20)

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.corp.example/debian
Suites: bookworm bookworm-updates
Components: main

Types: deb
URIs: http://mirror.corp.example/debian-security
Suites: bookworm-security
Components: main

Types: deb-src
URIs: http://src.example/debian
Suites: bookworm

Types: deb
Enabled: no
URIs: http://disabled.example/debian
Suites: bookworm

Types: deb
URIs:
 https://second.example/debian/
 cdrom:/media/
Suites: bookworm
"""

ONE_LINE = """\
# deb http://commented.example/debian bookworm main
deb [arch=amd64 signed-by=/usr/share/keyrings/k.gpg] http://one.example/debian bookworm main
deb http://one.example/debian-security bookworm-security main
deb-src http://one.example/debian bookworm main
deb http://mirror.corp.example/debian bookworm contrib
"""


def test_mirrors_come_from_the_apt_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(fetch.ENV_MIRROR, raising=False)
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(DEB822)
    (tmp_path / "sources.list").write_text(ONE_LINE)
    sources = (tmp_path / "sources.list", tmp_path / "sources.list.d")
    assert fetch.mirrors(sources) == [
        "http://one.example/debian",
        "http://mirror.corp.example/debian",
        "https://second.example/debian",
    ]
    monkeypatch.setenv(fetch.ENV_MIRROR, "http://override.example/debian/")
    assert fetch.mirrors(sources) == ["http://override.example/debian"]
    monkeypatch.delenv(fetch.ENV_MIRROR)
    assert fetch.mirrors((tmp_path / "absent",)) == []


def test_no_mirror_host_in_the_code() -> None:
    assert not re.search(r"https?://\w", Path(fetch.__file__).read_text())  # a scheme, never a host


def test_no_apt_source_says_set_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(fetch.ENV_MIRROR, raising=False)
    monkeypatch.setattr(fetch, "APT_SOURCES", (tmp_path / "none",))
    with pytest.raises(FetchError, match=f"name no Debian mirror; set \\${fetch.ENV_MIRROR}"):
        fetch.download(fetch.WORDNET_BASE, tmp_path / "dl")
