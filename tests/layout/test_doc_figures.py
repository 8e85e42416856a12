"""Figures the examples and benchmarks state that the code decides: the size of the seeded evaluation
sample of a large knowledge graph's split (was 1,000 in their comments after the code ranked 2,000), and
the count of bad typed inputs README cites from their test (said 22 when there were 28), and the defaults
of graph.split for your own files, which its description left out."""

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


def test_the_split_description_states_the_defaults_of_your_own_files() -> None:
    from graphtrain.contract.spec import LABELLED_SPLIT, GraphSource, Split
    from graphtrain.runtime.data.triples import DEFAULT_SPLIT

    def said(s: Split) -> str:
        return "/".join(str(round(100 * f)) for f in (s.train, s.val, s.test))

    text = GraphSource.model_fields["split"].description or ""
    assert (
        f"{said(LABELLED_SPLIT)} of the labelled nodes" in text
        and f"{said(DEFAULT_SPLIT)} of a triples file" in text
    )


def test_every_own_data_example_says_what_writes_its_files() -> None:
    """The data is generated (examples/own-data/.gitignore): a fresh clone has none until make_data.py."""
    silent = [
        p.name
        for p in files_under("examples/own-data", suffixes=(".yaml",))
        if "make_data.py" not in p.read_text().split("apiVersion")[0]
    ]
    assert not silent, silent
