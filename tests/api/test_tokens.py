"""The token file's grammar (api/tokens.py): a token alone sees every namespace, `namespaces=a,b` limits
it; a malformed line is refused alone, by line number, never showing its text."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from graphtrain.api import auth, tokens
from graphtrain.api.tokens import EVERY, Grant, narrowest, parse

A = "token-of-team-a-0123456789"
B = "token-of-team-b-0123456789"
ADMIN = "token-of-the-platform-team-0123"


def test_a_bare_token_sees_every_namespace_and_a_listed_one_its_namespaces() -> None:
    parsed = parse(
        f"# the platform team's\n{ADMIN}\n\n  {A}   namespaces=team-a  \n{B}\tnamespaces=team-b,team-c\n"
    )
    assert parsed.grants == {
        ADMIN: EVERY,
        A: Grant(frozenset({"team-a"})),
        B: Grant(frozenset({"team-b", "team-c"})),
    }
    assert parsed.problems == []
    assert EVERY.sees("anything") and parsed.grants[B].sees("team-c") and not parsed.grants[A].sees("team-b")


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("short namespaces=team-a", "a token is one word of at least 16 characters"),
        (f"{A} namespace=team-a", "only namespaces=NS[,NS...] may follow"),  # the key misspelt
        (f"{A} namespaces=", "namespaces= takes namespace names"),
        (f"{A} namespaces", "only namespaces=NS[,NS...] may follow"),
        (f"{A} namespaces=team-a,", "namespaces= takes namespace names"),
        (f"{A} namespaces=Team_A", "namespaces= takes namespace names"),
        (f"{A} namespaces=team-a, team-b", "only namespaces=NS[,NS...] may follow"),
        (f"{A} namespaces=team-a namespaces=team-b", "only namespaces=NS[,NS...] may follow"),
        (f"{A} {B}", "only namespaces=NS[,NS...] may follow"),  # two tokens run together
        (f"{A} # team a", "only namespaces=NS[,NS...] may follow"),  # comments are whole lines
        (f"{A} namespaces={'x' * 64}", "namespaces= takes namespace names"),
        # a line whose token, or the space before namespaces=, was left out: one bare word, which was a
        # token for every namespace (the first a guessable one)
        ("namespaces=team-a,team-b", "a token cannot hold namespaces= (is the token"),
        (f"{A}namespaces=team-a", "a token cannot hold namespaces="),
        (f"{A}Namespace=team-a", "a token cannot hold namespaces="),
        (f"{A}\u200bnamespaces=team-a", "a token is printable ASCII"),  # a zero-width space
        (f"{A}\u00e9", "a token is printable ASCII"),  # no Authorization header carries it as written
    ],
)
def test_a_malformed_line_is_refused_alone_by_number_never_by_text(line: str, why: str) -> None:
    parsed = parse(f"{ADMIN}\n{line}\n")
    assert parsed.grants == {ADMIN: EVERY}  # never every namespace for a line that meant fewer
    [problem] = parsed.problems
    assert problem.startswith("line 2: ") and why in problem
    assert all(text not in problem for text in (A, B, "short", "team", "Team", "xxx"))


def test_a_file_as_an_editor_on_another_system_writes_it() -> None:
    """A BOM, CRLF line ends, tabs and a non-breaking space between the words: read as meant."""
    parsed = parse(f"\ufeff{A} namespaces=team-a,team-a\r\n{B}\u00a0namespaces=team-b\r\n\t{ADMIN}\r\n")
    assert parsed.grants == {A: Grant(frozenset({"team-a"})), B: Grant(frozenset({"team-b"})), ADMIN: EVERY}
    assert parsed.problems == []


@pytest.mark.parametrize("brk", ["\f", "\v", "\r", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"])
def test_only_lf_ends_a_line_so_a_scoped_token_never_becomes_a_bare_one(brk: str) -> None:
    """splitlines ended a line at each of these: `A<brk>namespaces=team-a` was A for every namespace."""
    parsed = parse(f"{ADMIN}\n{A}{brk}namespaces=team-a\n# a note{brk}{B}\n")
    assert parsed.grants == {ADMIN: EVERY, A: Grant(frozenset({"team-a"}))}  # B is inside a comment
    [problem] = parsed.problems
    assert problem.startswith("line 2: ") and "lines end at LF only" in problem
    assert A not in problem and "team" not in problem


def test_a_line_not_utf8_is_refused_alone_and_its_bytes_never_shown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tokens"
    bad = b"token-\xff\xfe-of-team-b-0123 namespaces=team-b\n"
    path.write_bytes(f"{ADMIN}\n".encode() + bad + b"# \xe9t\xe9\n")
    with caplog.at_level(logging.WARNING, logger="graphtrain.api"):
        file = auth.TokenFile(path)  # it used to refuse the whole file, naming a byte and its place
    assert file.grant(ADMIN) == EVERY
    assert [r.getMessage() for r in caplog.records] == [f"token file {path}: line 2: not UTF-8; refused"]


def test_a_token_on_two_lines() -> None:
    same = parse(f"{A} namespaces=team-a,team-b\n{B}\n{A} namespaces=team-b,team-a\n")
    assert same.grants[A] == Grant(frozenset({"team-a", "team-b"}))
    assert same.problems == ["lines 1, 3: one token repeated with the same namespaces; kept"]
    for second in (A, f"{A} namespaces=team-b"):  # wider or other: neither is safely what was meant
        differ = parse(f"{A} namespaces=team-a\n{B}\n{second}\n")
        assert differ.grants == {B: EVERY}
        assert differ.problems == ["lines 1, 3: one token with different namespaces; all refused"]


def test_the_file_logs_each_refused_line_and_serves_the_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"{A} namespaces=team-a\n{B} namespaces=team-b,\n")
    with caplog.at_level(logging.WARNING, logger="graphtrain.api"):
        file = auth.TokenFile(path)
    assert file.grant(A) == Grant(frozenset({"team-a"})) and file.grant(B) is None
    assert [r.getMessage() for r in caplog.records] == [
        f"token file {path}: line 2: namespaces= takes namespace names (lowercase letters, digits and '-') "
        "separated by commas"
    ]
    assert B not in caplog.text and A not in caplog.text


def test_a_file_of_bad_lines_only_fails_closed(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"{A} namespace=team-a\n{B} namespaces=\n")
    with pytest.raises(auth.TokenFileError, match="no usable token .line 1: .*; line 2: ") as raised:
        auth.TokenFile(path)
    assert A not in str(raised.value) and B not in str(raised.value)
    assert tokens.NOTHING.namespaces == frozenset() and not tokens.NOTHING.sees("team-a")


def test_narrowest_keeps_what_both_grant() -> None:
    a, ab, b = Grant(frozenset({"a"})), Grant(frozenset({"a", "b"})), Grant(frozenset({"b"}))
    held = {"every": EVERY, "ab": ab, "a": a, "gone": EVERY}
    read = {"every": ab, "ab": EVERY, "a": b, "new": EVERY}
    assert narrowest(held, read) == {"every": ab, "ab": ab}  # "a": nothing in common, refused


@pytest.mark.parametrize(
    ("text", "cut"),
    [
        (f"{ADMIN}\n{A}", True),  # A's line stops before its namespaces
        (f"{ADMIN}\n{A} namespaces=team-a,te", True),
        (f"{ADMIN}\n{A} namespaces=team-a\n", False),
        (f"{ADMIN}\r\n{A} namespaces=team-a\r\n", False),
        (f"{ADMIN}\n# a comment without a line end", False),
        (f"{ADMIN}\n   ", False),
        (f"{ADMIN}\n{A}\r", True),  # a lone CR ends no line
        (f"{ADMIN}\n{A}\u2028", True),
        ("", False),
    ],
)
def test_a_last_line_without_its_line_end_may_be_cut_short(text: str, cut: bool) -> None:
    assert tokens.cut_short(text) is cut


class Writer:
    """The file a writer is still writing when the API starts: each pause at start, its next text."""

    def __init__(self, path: Path, texts: list[str]):
        self.path, self.texts, self.pauses = path, texts, 0
        path.write_text(texts[0])

    def sleep(self, seconds: float) -> None:
        assert seconds == auth.START_PAUSE
        self.pauses += 1
        if self.pauses < len(self.texts):  # the last text stays as it is
            self.path.write_text(self.texts[self.pauses])


def test_a_file_cut_short_at_start_is_read_again_before_any_token_is_accepted(tmp_path: Path) -> None:
    """Read once at start, `TOKEN` cut before its ` namespaces=team-a` was a token for every namespace
    until the next change; now it is read again until two reads agree."""
    writer = Writer(tmp_path / "tokens", [f"{ADMIN}\n{A}", f"{ADMIN}\n{A} namespaces=team-a\n"])
    file = auth.TokenFile(writer.path, sleep=writer.sleep)
    assert writer.pauses == 1 and file.grant(A) == Grant(frozenset({"team-a"}))


def test_a_whole_file_costs_no_second_read_and_one_without_a_line_end_one(tmp_path: Path) -> None:
    whole = Writer(tmp_path / "whole", [f"{ADMIN}\n{A} namespaces=team-a\n", "changed-after-start-0123\n"])
    assert auth.TokenFile(whole.path, sleep=whole.sleep).grant(ADMIN) == EVERY and whole.pauses == 0
    # as a chart's generated Secret or `kubectl create secret --from-literal`: one token, no line end
    secret = Writer(tmp_path / "secret", [ADMIN])
    assert auth.TokenFile(secret.path, sleep=secret.sleep).grant(ADMIN) == EVERY and secret.pauses == 1


def test_a_file_still_changing_at_start_accepts_no_token_until_it_reads_the_same_twice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    texts = [f"{A} namespaces=team-a,t{'e' * i}" for i in range(auth.START_READS + 1)]
    writer = Writer(tmp_path / "tokens", texts)
    clock = [0.0]
    with caplog.at_level(logging.WARNING, logger="graphtrain.api"):
        file = auth.TokenFile(writer.path, clock=lambda: clock[0], sleep=writer.sleep)
    assert writer.pauses == auth.START_READS - 1
    assert f"still changing after {auth.START_READS} reads" in caplog.text and A not in caplog.text
    assert file._grants == {}  # nothing yet: the first request's look reads the last text again
    last = Grant(frozenset({"team-a", "t" + "e" * (auth.START_READS - 1)}))
    assert file.grant(A) == last


def test_a_token_handed_through_a_pipe_without_a_line_end_is_read_once(tmp_path: Path) -> None:
    """`--token-file <(kubectl get secret ... -o jsonpath=... | base64 -d)`: a pipe, read to its end
    (whole: its writer closed it) and empty if read again, so the read again of a text cut_short made
    the start fail with "it holds no token". A file that is not a regular one is not read twice."""
    reader, writer = os.pipe()
    try:
        os.write(writer, ADMIN.encode())
        os.close(writer)
        pauses: list[float] = []
        file = auth.TokenFile(Path(f"/dev/fd/{reader}"), clock=lambda: 0.0, sleep=pauses.append)
        assert file.grant(ADMIN) == EVERY and pauses == []
    finally:
        os.close(reader)
