"""Reading a GraphTraining: every problem of a document at once (check), or the model (parse), from
YAML read as kubectl reads it, with size, depth and alias bounds."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any, NoReturn

from pydantic import (
    ValidationError,
)

from graphtrain.contract.spec.document import GraphTraining
from graphtrain.contract.spec.pods import pod_problems
from graphtrain.contract.spec.rules import (
    ROOT_PATH,
    Problem,
    broken_tree,
    loc_to_path,
    partial,
    problems_from_validation,
    validate_document,
)
from graphtrain.contract.spec.shown import shown

# ------------------------------------------------------------------------------------------ checking


def check(data: Any) -> tuple[GraphTraining | None, list[Problem]]:
    """Validate a GraphTraining document (dict): the model, or None and every problem found.

    The problems are the schema's (every field error) followed by every broken rule that can be
    decided: a rule is evaluated on the parts of the document that are valid, and skipped only when it
    reads a value that failed the schema, so a typo in one field hides no cross-field problem elsewhere.
    """
    if data is None:
        return None, [Problem(path=ROOT_PATH, message="the document is empty")]
    if not isinstance(data, dict):
        return None, [Problem(path=ROOT_PATH, message=f"expected a mapping, got {type(data).__name__}")]
    # as YAML's reader refuses them: no field takes one, and no JSON of the document can carry it
    long = [
        Problem(path=loc_to_path(at) or ROOT_PATH, message=f"{what}: too long to read")
        for at, what in _long(data)
    ]
    if long:
        return None, long
    try:
        gt: GraphTraining | None = validate_document(GraphTraining, data)
        schema: list[Problem] = []
        tree: Any = gt
    except ValidationError as exc:
        gt, schema, tree = None, problems_from_validation(exc), partial(GraphTraining, data)
    problems = schema + broken_tree(tree, "") + pod_problems(getattr(tree, "spec", None))
    return (None if problems else gt), problems


MAX_INT_BITS = 3_000  # ~900 digits, far past every field's bounds; Python prints no int past 4,300


def _long(value: Any, loc: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], str]]:
    """(where, what) of each integer in a document, a value or a mapping's key, too long to print (a
    caller's dict: YAML's reader refuses such a document itself)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, int) and abs(k).bit_length() > MAX_INT_BITS:
                yield loc, f"a key ({shown(k)})"
                continue
            yield from _long(v, (*loc, k if isinstance(k, str) else shown(k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _long(v, (*loc, i))
    elif isinstance(value, int) and abs(value).bit_length() > MAX_INT_BITS:
        yield loc, shown(value)


class SpecError(ValueError):
    """A spec failed validation; `problems` lists every problem found."""

    def __init__(self, problems: list[Problem], title: str = "invalid GraphTraining"):
        self.problems = problems
        if len(problems) == 1:  # one problem, one line
            super().__init__(f"{title}: {problems[0]}")
        else:
            super().__init__(f"{title}:\n" + "\n".join(f"  - {p}" for p in problems))


def parse(data: Any) -> GraphTraining:
    """Validate a GraphTraining document (dict) and return the model.

    Raises:
        SpecError: with every problem check() finds.
    """
    gt, problems = check(data)
    if gt is None:
        raise SpecError(problems)
    return gt


# ------------------------------------------------------------------------------------------- loading


MAX_YAML_DEPTH = 64  # a spec nests about 5 deep; PyYAML's loader recurses, out of stack a few hundred deep
MAX_YAML_NODES = 100_000  # a spec has about a hundred values
MAX_SPEC_BYTES = 1 << 20  # a spec is a few KB; the API server takes at most ~1.5 MB per object


# YAML 1.2 floats without a dot (`1e-8`), which PyYAML (YAML 1.1) reads as strings while kubectl and the
# API server read numbers: with strict types a spec valid for `kubectl apply` must be valid here too.
_FLOAT = re.compile(
    r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)"
    r"|\.[0-9_]+(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)


@functools.cache
def _loader() -> Any:
    """A safe loader (libyaml's when PyYAML has it, ~10x faster on large input) that reads numbers as
    kubectl does."""
    import yaml

    class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
        pass

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", _FLOAT, list("-+0123456789."))
    Loader.add_constructor("tag:yaml.org,2002:map", _mapping)
    Loader.add_constructor("tag:yaml.org,2002:int", _integer)
    return Loader


MAX_INT_CHARS = 100  # a spec's integers fit int64 (19 digits); Python refuses to read more than 4,300


def _integer(loader: Any, node: Any) -> Any:
    """An integer, refused at its line when longer than MAX_INT_CHARS (Python's own limit raised a
    ValueError, a traceback, past 4,300 digits)."""
    import yaml

    if len(node.value) > MAX_INT_CHARS:
        raise yaml.constructor.ConstructorError(
            None, None, f"an integer of {len(node.value):,} characters", node.start_mark
        )
    return yaml.SafeLoader.construct_yaml_int(loader, node)


def _mapping(loader: Any, node: Any) -> Any:
    """A mapping, refused when it names a key twice, as kubectl refuses it ("key already set in map"):
    PyYAML keeps the last silently, so `epochs: 10` then `epochs: 20` trained 20 epochs unsaid."""
    import yaml

    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
            continue
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r}",
                key_node.start_mark,
            )
        seen.add(key)
    return (yield from yaml.SafeLoader.construct_yaml_map(loader, node))


def yaml_error_text(exc: Exception) -> str:
    """One line of what PyYAML found wrong and where: "expected ',' or ']', but got '<stream end>' at
    line 2, column 1 (while parsing a flow sequence from line 1, column 9)", without PyYAML's quoted
    source lines and its `in "<unicode string>"` (the text was read from a file the caller names)."""
    import yaml

    if not isinstance(exc, yaml.MarkedYAMLError) or not exc.problem:
        return " ".join(str(exc).split())

    def at(mark: Any) -> str:
        return f"line {mark.line + 1}, column {mark.column + 1}"

    text = exc.problem + (f" at {at(exc.problem_mark)}" if exc.problem_mark else "")
    if exc.context:
        text += f" ({exc.context}" + (f" from {at(exc.context_mark)}" if exc.context_mark else "") + ")"
    return " ".join(text.split())


def yaml_document(text: str) -> Any:
    """The data of a YAML spec, read as kubectl reads it, after the size, depth and alias checks.

    Raises:
        SpecError: the text is over MAX_SPEC_BYTES, or the YAML is malformed, nests deeper than
            MAX_YAML_DEPTH or expands past MAX_YAML_NODES.
    """
    import yaml

    if len(text) > MAX_SPEC_BYTES:
        message = f"{len(text):,} characters: a GraphTraining spec is at most {MAX_SPEC_BYTES:,}"
        raise SpecError([Problem(path="(yaml)", message=message)])
    try:
        _check_depth(text)
        return yaml.load(text, Loader=_loader())  # noqa: S506 - a safe loader
    except yaml.YAMLError as exc:
        raise SpecError([Problem(path="(yaml)", message=yaml_error_text(exc))]) from None


def load_yaml(text: str) -> GraphTraining:
    """Parse YAML text into a validated GraphTraining.

    Raises:
        SpecError: as yaml_document(), or the spec is invalid.
    """
    return parse(yaml_document(text))


def _check_depth(text: str) -> None:
    """Refuse YAML nested deeper than MAX_YAML_DEPTH, or whose aliases expand it past MAX_YAML_NODES (a
    "billion laughs" document is a few lines), reading its events (no recursion, nothing expanded)
    before loading."""
    import yaml

    def refuse(event: Any, what: str) -> NoReturn:
        mark = event.start_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
        raise SpecError([Problem(path="(yaml)", message=f"{what} at {where}")])

    open_nodes: list[tuple[str | None, int]] = []  # (anchor, nodes before it) of each open collection
    sizes: dict[str, int] = {}  # an anchor's node count, expanded
    nodes = 0
    for event in yaml.parse(text, Loader=_loader()):
        if isinstance(event, yaml.AliasEvent):
            nodes += sizes.get(event.anchor or "", 1)
        elif isinstance(event, yaml.ScalarEvent):
            nodes += 1
            if event.anchor:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            open_nodes.append((event.anchor, nodes))
            nodes += 1
            if len(open_nodes) > MAX_YAML_DEPTH:
                refuse(event, f"nested deeper than {MAX_YAML_DEPTH} levels")
        elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            anchor, before = open_nodes.pop()
            if anchor:
                sizes[anchor] = nodes - before
        if nodes > MAX_YAML_NODES:
            refuse(event, f"expands to more than {MAX_YAML_NODES:,} values (YAML aliases)")
