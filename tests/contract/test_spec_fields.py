"""Every spec field is read by an executor; every status field is written by one.

A field no executor reads is a promise the system does not keep (issue 15: `sharding: collective` was
accepted and ignored). The evidence is syntactic: the executors' source (runtime/ without the spec
package and the CRD generator, and operator/) parsed with `ast`, a spec field counting as read when an
attribute of its Python name is loaded somewhere (`table.dim`, `getattr(x, "dim")`), directly or through
a spec property the executors use (`spec.num_shards` reads `shardServers.replicas`), or a key of its wire
name is read from a raw object (`meta.get("generation")`). Names are not
types, so a field whose name is also a common attribute (`dtype` of a tensor) passes on that name: such
fields are kept honest by the spec's rules (a float16 collective table is refused), not by this test.
What it does catch
is the usual drift: a new field, or one whose last reader was removed.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from pydantic import BaseModel

from graphtrain.contract.spec import (
    Affinity,
    GraphTraining,
    GraphTrainingSpec,
    GraphTrainingStatus,
    Toleration,
    Trainers,
)
from graphtrain.contract.spec.rules import model_in
from tests.tree import ROOT, files_under

# The spec's own definitions; the rest of contract/ (roles, conditions, reporting) is the code both
# executors share, so it counts as theirs.
SPEC_SIDE = (ROOT / "contract" / "spec", ROOT / "contract" / "crd.py")

# Spec fields no executor reads, each with why that is honest.
NOT_READ = {}

# Spec objects the operator hands to Kubernetes whole (dumped into the pod spec as written): Kubernetes
# reads their fields, so the object being read counts for all of them. tests/operator/test_placement.py
# checks each arrives in the pods unchanged.
PASSED_ON: dict[type[BaseModel], str] = {
    Toleration: "a pod's tolerations, as written (operator/placement.py)",
    Affinity: "a pod's affinity, as written (operator/placement.py)",
}


def executor_files() -> list[Path]:
    files = files_under("contract", "runtime", "operator", suffixes=(".py",))
    return [f for f in files if not any(f == s or s in f.parents for s in SPEC_SIDE)]


def loaded_attributes(tree: ast.AST) -> set[str]:
    """Names of the attributes and keys `tree` reads: `x.name` loads, `getattr(x, "name"[, default])`,
    and on raw objects (the operator reads metadata from the event's body) `x["key"]` and `x.get("key")`."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            out.add(node.attr)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            out.add(node.args[1].value)
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.slice, ast.Constant)
            and isinstance(node.slice.value, str)
        ):
            out.add(node.slice.value)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "get"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            out.add(node.args[0].value)
    return out


@cache
def executor_reads() -> frozenset[str]:
    """Attribute names the executors read, with those read by the spec properties they use."""
    reads = set()
    for path in executor_files():
        reads |= loaded_attributes(ast.parse(path.read_text(), str(path)))
    for model in models_under(GraphTraining):
        for name, member in vars(model).items():
            if isinstance(member, property) and name in reads and member.fget is not None:
                reads |= loaded_attributes(ast.parse(textwrap.dedent(inspect.getsource(member.fget))))
    return frozenset(reads)


def models_under(root: type[BaseModel]) -> set[type[BaseModel]]:
    found = {root}
    for field in root.model_fields.values():
        inner = model_in(field.annotation)
        if inner is not None and inner not in found:
            found |= models_under(inner)
    return found


def field_paths(
    model: type[BaseModel],
    prefix: str = "",
    skip: frozenset[str] = frozenset(),
    whole: frozenset[type[BaseModel]] = frozenset(),
) -> Iterator[tuple[str, str]]:
    """(camelCase path, Python name) of every field under `model`, `[]` marking a list's items; the
    fields of a `whole` model are not listed (the field holding it is)."""
    for name, field in model.model_fields.items():
        key = field.alias or name
        path = f"{prefix}.{key}" if prefix else key
        if path in skip:
            continue
        yield path, name
        inner = model_in(field.annotation)
        if inner is not None and inner not in whole:
            is_list = "list[" in str(field.annotation)
            yield from field_paths(inner, path + ("[]" if is_list else ""), skip, whole)


def unread(root: type[BaseModel], reads: frozenset[str], allowed: dict[str, str]) -> list[str]:
    """Paths of the fields under `root` (status left out) that no executor reads and no entry allows."""
    return [
        path
        for path, name in field_paths(root, skip=frozenset({"status"}), whole=frozenset(PASSED_ON))
        if name not in reads
        and path.rsplit(".", 1)[-1].removesuffix("[]") not in reads
        and path not in allowed
    ]


def test_every_spec_field_is_read_by_an_executor() -> None:
    missing = unread(GraphTraining, executor_reads(), NOT_READ)
    assert not missing, (
        f"spec fields read by no executor: {missing}. Read them in runtime/ or operator/, refuse the "
        "values that are not supported yet (a Rule in contract/spec/), or add an entry to NOT_READ "
        "saying why unread is honest"
    )


def test_not_read_entries_are_current() -> None:
    paths = dict(field_paths(GraphTraining, skip=frozenset({"status"})))
    assert set(NOT_READ) <= set(paths), f"NOT_READ names no field: {set(NOT_READ) - set(paths)}"
    read_now = [
        p for p in NOT_READ if paths[p] in executor_reads() or p.rsplit(".", 1)[-1] in executor_reads()
    ]
    assert not read_now, f"now read by an executor, so remove them from NOT_READ: {read_now}"


def test_a_new_unread_field_fails() -> None:
    """By construction: a spec grown by a field nobody reads is caught, at its path."""

    class Knob(Trainers):
        pinned_cpus_per_trainer: int = 0

    class Spec(GraphTrainingSpec):
        trainers: Knob = Knob()

    class Training(GraphTraining):
        spec: Spec

    assert unread(Training, executor_reads(), NOT_READ) == ["spec.trainers.pinnedCpusPerTrainer"]


def test_the_scan_sees_attribute_reads_and_getattr() -> None:
    tree = ast.parse(
        "a.b.c = x.dim\ny = getattr(t, 'lr')\nq.stored = 1\nm['uid']\nm.get('kind')\nm['w'] = 1\n"
    )
    assert loaded_attributes(tree) == {"b", "dim", "lr", "get", "uid", "kind"}


# ------------------------------------------------------------------------------------ status written


def written_names(tree: ast.AST) -> set[str]:
    """Names `tree` writes a value under: keyword arguments, attribute stores and string keys."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg:
            out.add(node.arg)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            out.add(node.attr)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.add(node.value)
    return out


def test_every_status_field_is_written_by_an_executor() -> None:
    """Status is written, not read: a field that nothing writes is a column that stays empty."""
    written = set()
    for path in executor_files():
        written |= written_names(ast.parse(path.read_text(), str(path)))
    missing = [
        path
        for path, name in field_paths(GraphTrainingStatus)
        if name not in written and path.rsplit(".", 1)[-1].rstrip("[]") not in written
    ]
    assert not missing, f"status fields written by no executor: {missing}"
