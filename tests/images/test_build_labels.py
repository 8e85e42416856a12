"""The labels naming a build (version, revision) reach the image whatever podman's layer cache holds:
podman 4.3 (buildah 1.28) reused a LABEL step made with another REVISION (the step's history text holds
`${REVISION}` unexpanded), so an image built from unchanged sources at a new commit carried the old
commit. build() passes them as --label too; no image is built here (podman is a stand-in)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.images import test_images


def test_build_passes_the_version_and_revision_as_labels(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[tuple[str, ...]] = []

    def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        calls.append(args)
        return subprocess.CompletedProcess(["podman", *args], 0, "", "")

    monkeypatch.setattr(test_images, "podman", podman)
    monkeypatch.setattr(test_images, "image_id", lambda ref: None)
    monkeypatch.setattr(test_images, "find_links", lambda: tmp_path)
    test_images.build("runtime", "localhost/hc-labels:test")
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=test_images.ROOT, capture_output=True, text=True
    ).stdout.strip()
    (args,) = [c for c in calls if c[0] == "build"]
    assert f"--label=org.opencontainers.image.revision={head or 'unknown'}" in args
    assert f"--label=org.opencontainers.image.version={test_images.pyproject_version()}" in args
