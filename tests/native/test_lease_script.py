"""scripts/lease-45 without a GPU: it parses, every gpu-accept step it names is a step of gpu-accept by
its whole name (so --only picks that step alone), and each part's caps fit one call of the device tool
(600 s, with some left for the machine's start). A lease's minutes are too few to find a typo there."""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.native.gpu_check_modules import ROOT, load

SCRIPT = ROOT / "scripts" / "lease-45"
accept = load("gpu_accept_script", ROOT / "scripts" / "gpu-accept")


def parts() -> dict[str, str]:
    """Each part's body (the case arms of the script)."""
    text = SCRIPT.read_text()
    return dict(re.findall(r"^  (\d)\)\n(.*?)\n    ;;", text, flags=re.M | re.S))


def test_the_script_parses() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_every_part_is_there() -> None:
    assert set(parts()) == {"1", "2", "3"}


@pytest.mark.parametrize("part", ["1", "2", "3"])
def test_every_accept_word_is_a_whole_step_name(part: str) -> None:
    names = {accept.step_name(s) for s in accept.steps()}
    words = re.findall(r'^\s+"([^"]+)"', parts()[part], flags=re.M)  # an accept call's word lines
    assert words
    for word in words:
        assert word in names, word


@pytest.mark.parametrize("part", ["1", "2", "3"])
def test_a_parts_caps_fit_one_call(part: str) -> None:
    body = parts()[part]
    caps = [int(c) for c in re.findall(r"^\s*step \S+ (\d+)", body, flags=re.M)]
    caps += [int(c) + 10 for c in re.findall(r"^\s*accept (\d+)", body, flags=re.M)]
    assert caps and sum(caps) <= 560, caps
