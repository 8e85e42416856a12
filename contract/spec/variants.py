"""Kinds with fields of their own (the task, the model): a union on `kind`, as users write it and as
Kubernetes can check it.

A user writes `model: {kind: gat, heads: 4}`: one object whose kind says which fields it may hold. Each
kind is a class of its own (a `Variant`): only its fields, with their defaults. That is what the
executors read (`spec.model.variant`), so no code reads a field of another kind.

On the wire the object is flat. A structural schema cannot say "these properties for that kind" (its
oneOf may not introduce properties), so the CRD declares every kind's fields on one object, unset by
default, and one rule per field says which kinds hold it: Python and the API server refuse `heads` on a
graphsage model with the same message. `wire_model()` builds that object from the kinds; a new kind is
a new Variant in the list it is built from, and its fields, their rules and its place in the CRD follow.

A field several kinds hold must be declared alike by each (type and bounds: the wire has one schema for
it); its default may differ, and each kind's is the one its variant applies. Since the wire carries no
default of a kind's field, a rule that reads one spells the default out (`cel_or_default`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, create_model
from pydantic.alias_generators import to_camel
from pydantic.fields import FieldInfo

from graphtrain.contract.spec.base import SpecModel
from graphtrain.contract.spec.rules import Rule, add_rules


class Variant(SpecModel):
    """One kind of a union: its own fields and their defaults. `KIND` is its value of `kind`."""

    KIND: ClassVar[str]


class WireUnion(SpecModel):
    """The flat object a union is written as: `kind` and every kind's fields (unset unless written)."""

    VARIANTS: ClassVar[dict[str, type[Variant]]]
    kind: str

    if TYPE_CHECKING:  # the kinds' fields, made by wire_model(): unknown to a static checker

        def __getattr__(self, name: str) -> Any: ...

    @property
    def variant(self) -> Variant:
        """This object as its kind's Variant: the fields written, the kind's defaults for the rest."""
        cls = self.VARIANTS[self.kind]
        written = {name: getattr(self, name) for name in cls.model_fields if getattr(self, name) is not None}
        return cls.model_validate(written)

    @classmethod
    def fields_of(cls, kind: str) -> frozenset[str]:
        """The Python names of the fields kind `kind` holds."""
        return frozenset(cls.VARIANTS[kind].model_fields)

    @classmethod
    def kinds_holding(cls, name: str) -> list[str]:
        """The kinds that hold field `name` (Python name), in declaration order."""
        return [k for k, v in cls.VARIANTS.items() if name in v.model_fields]


def cel_strings(values: Sequence[str]) -> str:
    """A CEL list of string literals."""
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _same_declaration(a: FieldInfo, b: FieldInfo) -> bool:
    return a.annotation == b.annotation and repr(a.metadata) == repr(b.metadata)


def _defaults_text(name: str, variants: Sequence[type[Variant]]) -> str:
    """' Default: 256.' or ' Default: graphsage 256, gat 64.' (each kind's own default)."""
    found: dict[str, Any] = {}
    for v in variants:
        info = v.model_fields.get(name)
        if info is not None and not info.is_required():
            found[v.KIND] = info.get_default(call_default_factory=True)
    shown = {k: ("unset" if d is None else d) for k, d in found.items()}
    if not shown:
        return ""
    values = set(map(repr, shown.values()))
    if len(values) == 1:
        return f" Default: {_show(next(iter(shown.values())))}."
    return " Default: " + ", ".join(f"{k} {_show(d)}" for k, d in shown.items()) + "."


def _show(value: Any) -> str:
    if hasattr(value, "value"):
        value = value.value
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def wire_model(
    name: str,
    doc: str,
    variants: Sequence[type[Variant]],
    default_kind: str | None,
    kind_description: str,
    prefix: str,
    extra_fields: dict[str, tuple[Any, FieldInfo]] | None = None,
    owned_here: bool = True,
) -> type[WireUnion]:
    """The flat wire model of `variants`: `kind` (one of theirs) and each field any of them holds, unset
    by default. `extra_fields` are wire-only fields no kind holds (an old form's, read by a before-
    validator). With `owned_here`, each field's rule (which kinds hold it) is added to the wire model;
    else the caller adds them where they can see what they need (see ownership_rules)."""
    kinds = [v.KIND for v in variants]
    fields: dict[str, Any] = {}
    seen: dict[str, FieldInfo] = {}
    for v in variants:
        for fname, info in v.model_fields.items():
            if fname in seen:
                if not _same_declaration(seen[fname], info):
                    raise TypeError(f"{name}.{fname}: declared differently by two kinds ({v.KIND})")
                continue
            seen[fname] = info
            holders = [k for k in kinds if fname in next(x for x in variants if k == x.KIND).model_fields]
            description = (info.description or "").rstrip()
            text = f"{', '.join(holders)}: {description}{_defaults_text(fname, variants)}"
            unset = FieldInfo.merge_field_infos(info, default=None, description=text)
            unset.default_factory = None
            annotation: Any = info.annotation
            fields[fname] = (annotation | None, unset)
    for fname, (extra, extra_info) in (extra_fields or {}).items():
        fields[fname] = (extra | None, extra_info)
    kind_type: Any = Literal[tuple(kinds)]
    kind_field = (
        Field(default=default_kind, description=kind_description)
        if default_kind is not None
        else Field(description=kind_description)
    )
    wire = create_model(name, __base__=WireUnion, __doc__=doc, kind=(kind_type, kind_field), **fields)
    wire.VARIANTS = {v.KIND: v for v in variants}
    if owned_here:
        add_rules(wire, *ownership_rules(wire, prefix, "self", lambda obj: obj))
    return wire


def ownership_rules(
    wire: type[WireUnion],
    prefix: str,
    cel_self: str,
    get: Callable[[Any], Any],
    names: Sequence[str] | None = None,
    waived: tuple[str, Callable[[Any], bool]] | None = None,
) -> tuple[Rule, ...]:
    """For each field of `wire` that some kind holds (or those in `names`), the rule that only the
    kinds holding it may hold it, named `<prefix>-<field>-kinds`. `cel_self`: the wire object in CEL
    (`self`, or `self.model` from the spec); `get(obj)`: the same in Python; `waived`: a condition
    (CEL, Python) under which the rule holds anyway (an old form); the field is reported where the
    wire object is (`cel_self` without `self`)."""
    out = []
    base = cel_self.removeprefix("self").removeprefix(".")
    for fname in names if names is not None else list(wire.model_fields):
        kinds = tuple(wire.kinds_holding(fname))
        if fname == "kind" or not kinds:
            continue
        camel = to_camel(fname)
        cel_waived, py_waived = waived if waived is not None else ("false", _never)

        def holds(
            o: Any, f: str = fname, ks: tuple[str, ...] = kinds, w: Callable[[Any], bool] = py_waived
        ) -> bool:
            return w(o) or getattr(get(o), f) is None or get(o).kind in ks

        out.append(
            Rule(
                f"{prefix}-{camel}-kinds",
                f"{base}.{camel}" if base else camel,
                holds,
                cel=f"{cel_waived} || !has({cel_self}.{camel}) || {cel_self}.kind in {cel_strings(kinds)}"
                if waived is not None
                else f"!has({cel_self}.{camel}) || {cel_self}.kind in {cel_strings(kinds)}",
                message=f"%s does not read it ({', '.join(kinds)} {'does' if len(kinds) == 1 else 'do'})",
                args=((f"{cel_self}.kind", lambda o: get(o).kind),),
            )
        )
    return tuple(out)


def _never(_obj: Any) -> bool:
    return False


def cel_or_default(cel_self: str, wire: type[WireUnion], name: str, kind: str) -> str:
    """CEL for field `name` of the wire object `cel_self`, or kind `kind`'s default when unset."""
    camel = to_camel(name)
    default = wire.VARIANTS[kind].model_fields[name].get_default(call_default_factory=True)
    shown = default.value if hasattr(default, "value") else default
    literal = (
        f"'{shown}'" if isinstance(shown, str) else str(shown).lower() if isinstance(shown, bool) else shown
    )
    return f"(has({cel_self}.{camel}) ? {cel_self}.{camel} : {literal})"
