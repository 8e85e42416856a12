"""The base of every spec model and the values every section shares: the resource's names,
bounds, the DNS and label patterns, and Kubernetes quantities."""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Final, Self

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    StringConstraints,
    ValidationInfo,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError

from graphtrain.contract.spec.rules import (
    PATTERN_WORDS,
    broken_rules,
    rules_of,
)
from graphtrain.contract.spec.shown import shown

GROUP: Final = "graphtrain.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = "graphtrain.io/v1alpha1"
KIND: Final = "GraphTraining"
PLURAL: Final = "graphtrainings"
SINGULAR: Final = "graphtraining"
SHORT_NAMES: Final = ["gtr"]

# Children are named `<name>-shards-<i>`, `<name>-trainer-<i>`, `<name>-partition`: a StatefulSet name
# must leave room for the controller-revision-hash label (63 - 11), so names are capped well below it.
MAX_NAME_LENGTH = 40
DNS1035 = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
IDENT = r"^[a-z][a-z0-9_]*$"
# Kubernetes resource.Quantity, the pattern of the Kubernetes OpenAPI definition without its minus
# sign: every quantity in a spec is an amount (resources, sizes, limits), so "-1" is refused.
_QUANTITY = re.compile(
    r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
# Bounds the API server's CEL cost estimate needs (it refuses a CRD whose rules could cost too much on
# an unbounded list or string); each is far above what a job uses.
MAX_TABLES = 8  # a model reads at most 3 tables
MAX_LAYERS = 8
MAX_INIT = 1e38  # |low|, |high| of a uniform init: high - low stays below float32's 3.4e38
MAX_TYPES = 64  # node types, edge types, files per type, feature columns per file: bounds for CEL's costs
# A node type's or relation's name: what graph files and typed datasets call it (no ':', which joins the
# three parts of a canonical edge type "source:relation:destination").
TYPE_NAME = r"^[A-Za-z_][A-Za-z0-9_.-]*$"
TypeName = Annotated[str, StringConstraints(min_length=1, max_length=63, pattern=TYPE_NAME)]
PATTERN_WORDS[TYPE_NAME] = (
    "a node type or relation name: a letter or _, then letters, digits, _, . or - (no ':': a relation, "
    "not source:relation:destination)"
)


class SpecModel(BaseModel):
    """Base of every spec model: camelCase on the wire, unknown fields refused, rules checked."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=True,
        use_enum_values=True,
        allow_inf_nan=False,  # JSON (the API server) has no NaN or infinity: `margin: .inf` is no value
    )

    @model_validator(mode="after")
    def _rules_hold(self, info: ValidationInfo) -> Self:
        if isinstance(info.context, dict) and info.context.get("rules") is False:
            return self
        problems = broken_rules(self)
        if problems:
            # The structured problems ride in the error context so problems_from_validation can
            # report each at its own path.
            raise PydanticCustomError(
                "rules",
                "{summary}",
                {"summary": "; ".join(map(str, problems)), "problems": [p.model_dump() for p in problems]},
            )
        return self

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        json_schema = handler(schema)
        rules = rules_of(cls)
        if rules:
            handler.resolve_ref_schema(json_schema)["x-kubernetes-validations"] = [
                r.validation() for r in rules
            ]
        return json_schema


# ---------------------------------------------------------------------------------------- quantities


def _quantity(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected a Kubernetes quantity such as '2', '500m' or '4Gi', got {shown(value)}")
    text = str(value)
    if not _QUANTITY.match(text):
        raise ValueError(f"{shown(text)} is not a Kubernetes quantity (e.g. '2', '500m', '4Gi')")
    return text


Quantity = Annotated[
    str,
    BeforeValidator(_quantity),
    Field(json_schema_extra={"x-kubernetes-int-or-string": True}),
]

_BINARY_SUFFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL_SUFFIX = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def quantity_to_bytes(text: str) -> int:
    """Convert a memory quantity ('4Gi', '500M', '1e9') to bytes.

    Raises:
        ValueError: the text is not a quantity with a known suffix.
    """
    match = re.fullmatch(r"([0-9]+(?:\.[0-9]*)?(?:[eE][-+]?[0-9]+)?)([KMGTPE]i|[kMGTPE]?)", text.strip())
    if not match:
        raise ValueError(f"{shown(text)} is not a memory quantity such as '4Gi' or '512Mi'")
    number, suffix = match.groups()
    scale = _BINARY_SUFFIX.get(suffix) or _DECIMAL_SUFFIX[suffix]
    value = float(number) * scale
    if not math.isfinite(value):
        raise ValueError(f"{shown(text)} is too large a memory quantity")
    return int(value)


def _memory_quantity(text: str) -> str:
    quantity_to_bytes(text)  # ValueError naming the text: '500m' is a quantity, not of memory
    return text


MemoryQuantity = Annotated[Quantity, AfterValidator(_memory_quantity)]


class ObjectMeta(BaseModel):
    """The part of Kubernetes metadata the spec cares about; the rest is kept as is."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(min_length=1)
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    generation: int | None = None
