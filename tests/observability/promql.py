"""PromQL as the dashboards and alerts use it, read without a Prometheus: which metric names an
expression selects, what a Grafana `label_values(...)` variable queries, an expression with Grafana's
template variables substituted; and the series names the code exposes, read from its own registries.

The reader handles the PromQL the chart writes (selectors, ranges, aggregations with by/without,
binary operators with on/ignoring/group_*), not all of PromQL: a name it would miss makes the tests
that use it fail, not pass (every expression must name at least one metric).
"""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry, ProcessCollector

KEYWORDS = {
    "and",
    "or",
    "unless",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
}
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_VALUES = re.compile(r"^label_values\((?P<selector>[^,]+),\s*(?P<label>[a-zA-Z_][a-zA-Z0-9_]*)\)$")


def metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: every identifier that is not a function, a keyword,
    a label (in braces or a grouping clause), a duration or a string."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings: label values, regexes
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges: [5m], [$__rate_interval]
    text = GROUPING.sub(" ", text)
    names = set()
    for m in IDENT.finditer(text):
        before = text[m.start() - 1] if m.start() else " "
        after = text[m.end() :].lstrip()
        if before.isdigit() or before == "." or after.startswith("("):  # 1e3, 0.5; functions
            continue
        if m.group() not in KEYWORDS:
            names.add(m.group())
    return names


def label_values(definition: str) -> tuple[str, str]:
    """A Grafana variable's `label_values(selector, label)`: the metric name and the label."""
    found = LABEL_VALUES.match(definition.strip())
    assert found, f"not label_values(selector, label): {definition}"
    (name,) = metric_names(found.group("selector"))
    return name, found.group("label")


def label_values_selector(definition: str) -> str:
    found = LABEL_VALUES.match(definition.strip())
    assert found, definition
    return found.group("selector")


def substitute(expr: str, variables: dict[str, str]) -> str:
    """Grafana's template variables replaced by values: $name and ${name}, the longest names first
    (so $__rate_interval is not read as $__rate)."""
    for name in sorted(variables, key=len, reverse=True):
        expr = expr.replace(f"${{{name}}}", variables[name]).replace(f"${name}", variables[name])
    assert "$" not in expr, f"a variable left in {expr}"
    return expr


def registry_names(registry: CollectorRegistry) -> set[str]:
    """Every sample name a registry exposes now (histograms' _bucket, _sum, _count; counters' _total)."""
    return {s.name for family in registry.collect() for s in family.samples}


def defined_series_names() -> set[str]:
    """The series names graphtrain's code exposes, from the registries it builds: shard servers',
    trainers' (an evaluation reported, so the labelled gauge has a child, and a read counted), the
    operator's and the executor-level training metrics (the families of contract/telemetry.py),
    process_*."""
    from graphtrain.contract import telemetry
    from graphtrain.operator.endpoints import OperatorMetrics
    from graphtrain.runtime.kvstore.client.reads import count
    from graphtrain.runtime.kvstore.serving.metrics import ServerMetrics
    from graphtrain.runtime.train.metrics import TrainerMetrics

    shard = ServerMetrics(0, lambda: {"node": {"lo": 0, "hi": 1, "bytes": 8}}, load=lambda: {})
    trainer = TrainerMetrics(0)
    trainer.eval_metric.labels("0", "val_accuracy").set(0.5)
    count(0, "socket", 0)  # a read of shard 0 counted (no rows), so its family has a series
    process = CollectorRegistry()
    ProcessCollector(registry=process)
    names = registry_names(shard.registry) | registry_names(trainer.registry) | registry_names(process)
    names |= registry_names(OperatorMetrics().registry)
    return names | {family.name for family in telemetry.FAMILIES}


def selectors(expr: str) -> list[str]:
    """The vector selectors of an expression as written: each metric name with its matchers."""
    names = metric_names(expr)
    blanked = re.sub(r'"(?:[^"\\]|\\.)*"', lambda m: '"' + " " * (len(m.group()) - 2) + '"', expr)
    found = re.finditer(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(\{[^}]*\})?", blanked)
    spans = [(m.start(), m.end(), m.group(1)) for m in found if m.group(1) in names]
    return [expr[start:end].strip() for start, end, _ in spans]
