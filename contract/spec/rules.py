"""Cross-field rules of the spec models, checked in Python and, as CEL, by the Kubernetes API server.

A `Rule` belongs to one model (`add_rules`) and is written twice on purpose: in Python, because the
local executor has no API server, and in CEL, which the CRD carries as `x-kubernetes-validations` so
that `kubectl apply` refuses a broken spec before the operator sees it. Both render one message
template, and tests/operator/test_crd_validation.py breaks every rule against a real API server to hold
the two to the same verdict and text.

The rest reports every problem of a document at once: `partial()` builds a model from a document as far
as it is valid, INVALID standing for each value that failed the schema, and `broken_tree()` evaluates
every rule on it, skipping a rule only when it reads an INVALID value (a rule judged on a default the
user never wrote would report a problem that is not there). Nothing here knows the GraphTraining
models; model.py does.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Final, TypeVar, get_args, get_origin

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from graphtrain.contract.spec.shown import error_message, name_in_path, printable, shown, with_value

# Validation context that leaves the rules to broken_tree(), which evaluates them on partly valid
# documents too (pydantic runs a model's validators only when all its fields are valid).
NO_RULES: Final = {"rules": False}
M = TypeVar("M", bound=BaseModel)


class _Unknown(Exception):
    """Raised when a rule touches a value that failed schema validation: the rule cannot be decided."""


class _Invalid:
    """Stands in, in a partially valid spec, for a value that failed schema validation.

    Any use of it (comparison, attribute, length, formatting, truth) raises _Unknown, so a rule that
    reads it is skipped rather than judged on a default the user never wrote."""

    __slots__ = ()

    def _unknown(self, *args: object, **kwargs: object) -> Any:
        raise _Unknown

    __getattr__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __hash__ = _unknown
    __len__ = __iter__ = __contains__ = __bool__ = __str__ = __format__ = __getitem__ = _unknown
    __int__ = __float__ = __add__ = __radd__ = __sub__ = __rsub__ = _unknown
    __mul__ = __rmul__ = __floordiv__ = __rfloordiv__ = __truediv__ = __rtruediv__ = __neg__ = _unknown
    __mod__ = __rmod__ = __divmod__ = __rdivmod__ = __pow__ = __rpow__ = __abs__ = __round__ = _unknown

    def __repr__(self) -> str:
        return "<invalid>"


INVALID: Final = _Invalid()


@dataclass(frozen=True)
class Rule:
    """A rule over one model's fields that a per-field schema cannot express.

    `holds` is the Python check, `cel` the same rule for the API server (CEL over `self`, the model's
    object). `message` is the text of a broken rule, a template whose `%s`/`%d` take `args`: each arg
    pairs a CEL expression with the Python function that computes the same value, and both sides
    render the template the same way (CEL's `format()`: a list prints as JSON), so `kubectl apply` and
    `graphtrain validate` say the same thing. `field` is where the problem is reported, relative to the
    model ("" for the model itself); it becomes the CEL rule's fieldPath.
    """

    name: str
    field: str
    holds: Callable[[Any], bool]
    cel: str
    message: str
    args: tuple[tuple[str, Callable[[Any], object]], ...] = ()

    def render(self, obj: Any) -> str:
        """The message for `obj`, formatted as CEL's `format()` would."""
        values = iter([fn(obj) for _, fn in self.args])
        return re.sub(r"%[sd]", lambda _: _cel_text(next(values)), self.message)

    def validation(self) -> dict[str, str]:
        """The rule as one entry of the CRD's x-kubernetes-validations."""
        out = {"rule": self.cel}
        if self.args:
            template = "'" + self.message.replace("\\", "\\\\").replace("'", "\\'") + "'"
            out["messageExpression"] = f"{template}.format([{', '.join(e for e, _ in self.args)}])"
        else:
            out["message"] = self.message
        if self.field:
            out["fieldPath"] = "." + self.field
        return out


def _cel_text(value: object) -> str:
    if isinstance(value, str):  # a key the user wrote with a newline must not start a second line
        return printable(value)
    if isinstance(value, bool | list):
        return json.dumps(value)
    return str(value)


RULES: dict[type[BaseModel], tuple[Rule, ...]] = {}


def first_repeated(values: list[str]) -> str | None:
    """The first value that occurs again earlier in `values`, None when all differ."""
    return next((v for i, v in enumerate(values) if v in values[:i]), None)


def distinct(name: str, field: str, attr: str, what: str) -> Rule:
    """The rule that list `field` (wire name; `attr` in Python, None or empty when unset) names no
    `what` twice."""
    return Rule(
        name,
        field,
        lambda o: not getattr(o, attr) or first_repeated(getattr(o, attr)) is None,
        cel=f"!has(self.{field}) || self.{field}.all(n, self.{field}.exists_one(m, m == n))",
        message=f"names {what} '%s' twice",
        args=(
            (
                f"self.{field}.filter(n, !self.{field}.exists_one(m, m == n))[0]",
                lambda o: first_repeated(getattr(o, attr)),
            ),
        ),
    )


def add_rules(model: type[BaseModel], *rules: Rule) -> None:
    RULES[model] = RULES.get(model, ()) + rules


def rules_of(model: type[BaseModel]) -> tuple[Rule, ...]:
    """The rules of `model`, those of the models it derives from included."""
    return tuple(rule for base in reversed(model.__mro__) for rule in RULES.get(base, ()))


def broken_rules(obj: BaseModel, path: str = "") -> list[Problem]:
    """The rules of `obj`'s own model that do not hold, as problems under `path`; a rule that reads a
    value that failed the schema (INVALID) is skipped."""
    out: list[Problem] = []
    for rule in rules_of(type(obj)):
        try:
            if rule.holds(obj):
                continue
            message = rule.render(obj)
        except _Unknown:
            continue
        out.append(Problem(path=join_path(path, rule.field) or ROOT_PATH, message=message))
    return out


def decided(check: Callable[[Any], list[Problem]], obj: Any) -> list[Problem]:
    """`check(obj)`, or nothing when it reads a value that failed the schema (INVALID)."""
    try:
        return check(obj)
    except _Unknown:
        return []


ROOT_PATH: Final = "(root)"  # the path of a problem with the whole document (or model)


def _relative(path: str) -> str:
    return "" if path == ROOT_PATH else path


def join_path(path: str, field: str) -> str:
    """`path.field`; either may be empty (the document's root, the model itself)."""
    return f"{path}.{field}" if path and field else path or field


class Problem(BaseModel):
    """One thing wrong with a spec: where (dotted camelCase path) and what."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def loc_to_path(loc: tuple[Any, ...]) -> str:
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts.append(f"[{item}]")
        elif str(item).startswith(("function-", "constrained-", "lax-")):
            continue
        else:
            parts.append(("." if parts else "") + name_in_path(str(item)))
    return "".join(parts)


# What a string of a pattern is, in words, by pattern (base.py registers its own): pydantic says only
# "String should match pattern '^[A-Za-z_]...'", which names neither the value nor what to write instead.
PATTERN_WORDS: dict[str, str] = {}


def problems_from_validation(error: ValidationError) -> list[Problem]:
    """Turn pydantic's errors into Problems with camelCase paths as the user wrote them, each naming
    the value written too (shown(): short, on one line, not a secret's)."""
    out: list[Problem] = []
    for err in error.errors(include_url=False):
        loc = tuple(err["loc"])
        where = loc_to_path(loc)
        if err["type"] == "rules":  # broken rules of the model at `where`, each at its own field
            out.extend(
                Problem(path=join_path(where, _relative(p["path"])) or ROOT_PATH, message=p["message"])
                for p in err["ctx"]["problems"]
            )
            continue
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        elif err["type"] == "string_pattern_mismatch" and (words := PATTERN_WORDS.get(err["ctx"]["pattern"])):
            msg = with_value(f"{shown(err['input'])} is not {words}", err["input"], loc)
        else:
            msg = error_message(err)
        out.append(Problem(path=where or ROOT_PATH, message=msg))
    return out


def broken_tree(obj: Any, path: str) -> list[Problem]:
    """Broken rules of every model in a (partially valid) tree, parents before children."""
    if isinstance(obj, list):
        return [p for i, item in enumerate(obj) for p in broken_tree(item, f"{path}[{i}]")]
    if not isinstance(obj, BaseModel):
        return []
    out = broken_rules(obj, path)
    for name, field in type(obj).model_fields.items():
        out += broken_tree(obj.__dict__.get(name), join_path(path, field.alias or name))
    return out


def partial(model: type[BaseModel], data: Any) -> Any:
    """`data` as a `model`, as far as it is valid: fields that fail the schema hold INVALID.

    Built without validation (model_construct) from fields validated one by one, sub-models
    recursively, so the rules can run on everything that is valid."""
    try:
        return validate_document(model, data)
    except ValidationError:
        pass
    if not isinstance(data, dict):
        return INVALID
    values: dict[str, Any] = {}
    for name, field in model.model_fields.items():
        key = next((k for k in (field.alias, name) if k is not None and k in data), None)
        if key is None:
            values[name] = INVALID if field.is_required() else field.get_default(call_default_factory=True)
            continue
        value, inner = data[key], model_in(field.annotation)
        if inner is not None and isinstance(value, dict) and not _list_only(field.annotation):
            values[name] = partial(inner, value)
        elif inner is not None and isinstance(value, list) and get_origin(field.annotation) is list:
            values[name] = [partial(inner, item) for item in value]
        else:
            try:
                values[name] = _field_adapter(model, name).validate_json(
                    as_json(value), strict=True, context=NO_RULES, by_alias=True, by_name=False
                )
            except ValidationError:
                values[name] = INVALID
    return model.model_construct(**values)


def _list_only(annotation: Any) -> bool:
    """Whether `annotation` takes its model only in a list (`list[M]`, `list[M] | None`): a mapping
    there is a wrong type, not a partial model (rules would iterate the model's fields as items)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return False
    args = [a for a in get_args(annotation) if a is not type(None)]
    return get_origin(annotation) is list or bool(args) and all(_list_only(a) for a in args)


def model_in(annotation: Any) -> type[BaseModel] | None:
    """The model class in `M`, `M | None` or `list[M]`, else None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for a in get_args(annotation) if (m := model_in(a)) is not None), None)


def as_json(data: Any) -> str:
    """A document as the API server receives it: JSON, mapping keys as strings, YAML's dates as text."""

    def keys_as_text(value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): keys_as_text(v) for k, v in value.items()}
        if isinstance(value, list):
            return [keys_as_text(v) for v in value]
        return value

    return json.dumps(keys_as_text(data), default=str)


def validate_document(model: type[M], data: Any) -> M:
    """Validate a user's document (YAML or the API server's object) with the types the CRD's schema
    checks: strict, so `useFeatures: "off"`, `replicas: true` or `epochs: "10"` are refused where a lax
    parse would read them as false, 1 and 10; camelCase names only, as on the wire. (Strict on JSON
    still takes an integer for a float, enum values as strings and arrays for tuples.)"""
    return model.model_validate_json(
        as_json(data), strict=True, context=NO_RULES, by_alias=True, by_name=False
    )


@functools.cache
def _field_adapter(model: type[BaseModel], name: str) -> TypeAdapter[Any]:
    field = model.model_fields[name]
    annotation: Any = Annotated[(field.annotation, *field.metadata)] if field.metadata else field.annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):  # a block: its own config
        return TypeAdapter(annotation)
    return TypeAdapter(annotation, config=ConfigDict(use_enum_values=True))
