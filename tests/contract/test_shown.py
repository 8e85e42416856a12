"""A bad value in a problem line: named, short, on one line, never a secret's (contract/spec/shown.py)."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from graphtrain.contract import conditions
from graphtrain.contract.spec import SpecError
from graphtrain.contract.spec.loading import check, load_yaml
from graphtrain.contract.spec.shown import SHOWN_CHARS, secret_name, shown, with_value
from tests.contract.spec_cases import GRAPHSAGE, edit

# the longest a shown value can be: SHOWN_CHARS of escapes, quotes, ellipsis and the length said
LONGEST = SHOWN_CHARS + 40


def problem_lines(change: Any) -> list[str]:
    return [str(p) for p in check(edit(GRAPHSAGE, change))[1]]


def epochs(value: object) -> list[str]:
    return problem_lines(lambda s: s.update(training={"epochs": value}))


def one_line(text: str) -> bool:
    return text.splitlines() == [text] and text.isprintable()


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (-3, "-3"),
        (2.5, "2.5"),
        (True, "true"),
        (None, "null"),
        ("ten", "'ten'"),
        ("it's", "'it\\'s'"),
        ("a\nb", "'a\\nb'"),
        ("a\x00b", "'a\\x00b'"),
        ("a\u2028b\u2029c\u0085d", "'a\\u2028b\\u2029c\\x85d'"),
        ("\u202eevil", "'\\u202eevil'"),  # a bidi override would reverse the rest of the line
        ("\ud800", "'\\ud800'"),  # a lone surrogate (JSON can carry one)
        ("é 中", "'é 中'"),  # printable text as written
        (b"\xff\xfe'", "b'\\xff\\xfe\\''"),  # bytes that are no UTF-8
        ({"a": {"b": 1}, "c": 2}, "a mapping of 2 keys"),
        ({"token": "s3cr3t"}, "a mapping of 1 key"),
        ([1, [2, 3]], "a list of 2 items"),
        ([], "a list of 0 items"),
        (datetime.date(2024, 1, 2), "2024-01-02"),
        # str() would raise past 4,300 digits (as pytest's id of it)
        pytest.param(10**5000, "an integer of about 5,001 digits", id="5001-digits"),
    ],
)
def test_a_value_is_shown_short_on_one_line(value: object, text: str) -> None:
    assert shown(value) == text


def test_long_text_is_cut_saying_how_long_it_was() -> None:
    assert shown("x" * 10_000) == f"'{'x' * SHOWN_CHARS}…' (10,000 characters)"
    assert shown("x" * SHOWN_CHARS) == f"'{'x' * SHOWN_CHARS}'"
    newline, byte = "\\n", "\\xff"  # as escaped
    assert shown("\n" * 10_000) == f"'{newline * (SHOWN_CHARS // 2)}…' (10,000 characters)"
    assert shown(b"\xff" * 10_000) == f"b'{byte * (SHOWN_CHARS // 4)}…' (10,000 bytes)"


@given(st.one_of(st.text(), st.binary(), st.integers(), st.floats()))
def test_any_value_shown_is_one_short_printable_line(value: object) -> None:
    text = shown(value)
    assert one_line(text) and len(text) <= LONGEST


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("token", True),
        ("authToken", True),
        ("vault.hashicorp.com/agent-inject-token", True),
        ("DB_PASSWORD", True),
        ("apiKey", True),
        ("private_key", True),
        ("imagePullSecrets", True),
        ("Authorization", True),
        ("author", False),  # a node type
        ("keys", False),
        ("tokenizer", False),
        ("epochs", False),
    ],
)
def test_a_secret_is_known_by_a_whole_word_of_its_name(name: str, secret: bool) -> None:
    assert secret_name(name) is secret


def test_a_value_is_added_once() -> None:
    loc = ("spec", "size")
    assert with_value("should be at least 10", 1, loc) == "should be at least 10, got 1"  # "1" is in "10"
    assert with_value("'x' is not a quantity", "x", loc) == "'x' is not a quantity"
    assert with_value("expected a quantity, got a list of 1 item", [1], loc) == (
        "expected a quantity, got a list of 1 item"
    )
    assert with_value("'pw' is not a quantity", "pw", ("spec", "password")) == (
        "the value (not shown) is not a quantity"
    )


def test_a_bad_value_is_named_after_the_field() -> None:
    assert epochs(-3) == ["spec.training.epochs: Input should be greater than or equal to 1, got -3"]
    assert epochs({"a": {"b": [1]}}) == [
        "spec.training.epochs: Input should be a valid integer, got a mapping of 1 key"
    ]
    assert epochs(10**80) == [
        "spec.training.epochs: Input should be less than or equal to 100000, got an integer of about 81 "
        "digits"
    ]


def test_an_integer_too_long_to_print_is_named_not_a_crash() -> None:
    """A caller's dict may hold an int no JSON of it can carry (Python prints none past 4,300 digits):
    each one, value or key, is named where it is, as YAML's reader refuses such a document."""
    lines = problem_lines(
        lambda s: s.update(
            training={"epochs": 10**5000, "fanouts": [3, -(10**4000)]},
            trainers={"nodeSelector": {10**5000: "a"}},
        )
    )
    assert lines == [
        "spec.training.epochs: an integer of about 5,001 digits: too long to read",
        "spec.training.fanouts[1]: an integer of about 4,001 digits: too long to read",
        "spec.trainers.nodeSelector: a key (an integer of about 5,001 digits): too long to read",
    ]
    assert epochs(10**800) == [  # long, yet printable: the field's own bound says what is wrong
        "spec.training.epochs: Input should be less than or equal to 100000, got an integer of about 801 "
        "digits"
    ]


@pytest.mark.parametrize("value", ["1\nspec.training.epochs: forged", "a\x00b", "a\u2028b", "x" * 10_000])
def test_a_value_cannot_break_or_forge_the_line(value: str) -> None:
    (line,) = epochs(value)
    assert line.startswith("spec.training.epochs: Input should be a valid integer, got '")
    assert one_line(line) and len(line) <= 60 + LONGEST


def test_a_key_in_the_path_cannot_break_the_line_either() -> None:
    lines = problem_lines(
        lambda s: s.update(training={"x" * 5000 + "\n": 1}, trainers={"nodeSelector": {"z\n": "a"}})
    )
    assert lines[0] == f"spec.training.'{'x' * SHOWN_CHARS}…' (5,001 characters): unknown field"
    assert lines[1].startswith("spec.trainers.nodeSelector.'z\\n'.[key]: 'z\\n' is not a label key")
    assert all(one_line(line) for line in lines)


def test_a_validators_own_message_shows_the_value_as_short() -> None:
    (line,) = problem_lines(lambda s: s.update(storage={"size": "9" * 10_000 + "Q"}))
    assert line == (
        f"spec.storage.size: '{'9' * SHOWN_CHARS}…' (10,001 characters) is not a Kubernetes quantity "
        "(e.g. '2', '500m', '4Gi')"
    )
    (line,) = problem_lines(lambda s: s.update(storage={"size": {"a": "b"}}))
    assert line.endswith("such as '2', '500m' or '4Gi', got a mapping of 1 key")


def test_a_secrets_value_is_never_shown() -> None:
    token = "ghp_" + "A" * 36
    lines = problem_lines(
        lambda s: s.update(
            podMetadata={"annotations": {"vault.hashicorp.com/agent-inject-token": [token], "team": 7}}
        )
    )
    assert lines == [
        "spec.podMetadata.annotations.vault.hashicorp.com/agent-inject-token: Input should be a valid "
        "string (value not shown)",
        "spec.podMetadata.annotations.team: Input should be a valid string, got 7",
    ]
    (line,) = problem_lines(lambda s: s.update(podMetadata={"annotations": {"db-password": token * 4000}}))
    assert token not in line and line.endswith("(value not shown)")


def test_yaml_input_is_shown_as_read() -> None:
    text = edit_yaml("epochs: !!binary /+4=")  # bytes that are no UTF-8
    with pytest.raises(SpecError) as info:
        load_yaml(text)
    assert one_line(str(info.value)) and "got 'b\\'\\\\xff\\\\xee\\''" in str(info.value)
    with pytest.raises(SpecError, match="an integer of 5,000 characters at line"):  # refused as read
        load_yaml(edit_yaml("epochs: " + "9" * 5000))


def edit_yaml(training_line: str) -> str:
    import yaml

    return yaml.safe_dump(GRAPHSAGE) + f"  training:\n    {training_line}\n"


def test_a_condition_message_is_cut_to_what_a_status_holds() -> None:
    """An invalid spec's problems, one per field, can be more than a Condition's message holds: the
    status says as much as fits instead of failing to be written."""
    doc = edit(GRAPHSAGE, lambda s: s.update(training={f"unknown{i:05}": 1 for i in range(2000)}))
    message = "; ".join(map(str, check(doc)[1]))
    assert len(message) > conditions.MAX_MESSAGE
    conds = conditions.Conditions([], "2024-01-01T00:00:00Z")
    conditions.set_spec_invalid(conds, message)
    said = conds.current["SpecValid"].message
    assert len(said) == conditions.MAX_MESSAGE
    assert said.startswith(message[:1000]) and said.endswith(f"… ({len(message):,} characters in all)")


def test_a_rules_message_escapes_what_would_break_the_line() -> None:
    """Rule messages name the value as their CEL twin does (printable text exactly as written), but a
    key with a newline cannot start a forged line."""
    lines = problem_lines(lambda s: s.update(podMetadata={"annotations": {"a\nspec.x: forged": "v"}}))
    assert lines == [
        "spec.podMetadata.annotations: annotation key 'a\\nspec.x: forged' is not a qualified name: an "
        "optional DNS prefix of at most 253 characters and '/', then 1-63 of A-Z a-z 0-9 - _ . starting and "
        "ending alphanumeric"
    ]
