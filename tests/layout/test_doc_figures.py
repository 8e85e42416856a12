"""Figures the examples and benchmarks state that the code decides: the size of the seeded evaluation
sample of a large knowledge graph's split (was 1,000 in their comments after the code ranked 2,000), and
the count of bad typed inputs README cites from their test (said 22 when there were 28)."""

from __future__ import annotations

import re

from graphtrain.runtime.train.kge import EVAL_MAX_TRIPLES
from tests.tree import ROOT, files_under


def test_the_stated_evaluation_sample_is_the_codes() -> None:
    said = {
        f"{path.name}: {m.group(0)}"
        for path in files_under("examples", "bench", "docs", suffixes=(".yaml", ".py", ".md"))
        for m in re.finditer(r"([\d,]+)-triple sample", path.read_text())
        if int(m.group(1).replace(",", "")) != EVAL_MAX_TRIPLES
    }
    assert not said, (EVAL_MAX_TRIPLES, sorted(said))


def test_the_readmes_count_of_bad_typed_inputs_is_the_tests() -> None:
    from tests.runtime.data.test_typed_files import BAD

    said = re.search(r"test_typed_files\.py: (\d+) such inputs", (ROOT / "README.md").read_text())
    assert said is not None and int(said.group(1)) == len(BAD), (said, len(BAD))
