"""What a run stored is printed, never acted on by the terminal (probe45b): a model's text
with ESC sequences (clear the screen, set the title), a lone C1 CSI or a bidirectional
override reached ``show``, ``runs`` and error lines raw, where it could rewrite what the
person reading it sees. ``--json`` output keeps them escaped (the JSON test at the end)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright.cli import main
from loopwright.cli._table import printable

# clear the screen; set the window title; C1 CSI alone; right-to-left override; DEL; CR
HOSTILE = "ok\x1b[2J\x1b]0;pwned\x07 \x9b31m \u202eevil\x7f\rover"
WRITTEN = "ok\\x1b[2J\\x1b]0;pwned\\x07 \\x9b31m \\u202eevil\\x7f\\x0dover"
RAW = ("\x1b[2J", "\x1b]", "\x07", "\x9b", "\u202e", "\x7f", "\r")


def test_printable_writes_out_what_a_terminal_acts_on_and_keeps_the_rest() -> None:
    assert printable(HOSTILE) == WRITTEN
    kept = "line one\n\ttab, naïve, 日本語, emoji 🙂, ZWNJ می\u200cخواهم"
    assert printable(kept) is kept
    # the bidirectional marks and the line and paragraph separators too (split46)
    marks = "a\u200eb\u200fc\u061cd\u2028e\u2029f"
    assert printable(marks) == "a\\u200eb\\u200fc\\u061cd\\u2028e\\u2029f"


def _run_writing(tmp_path: Path, text: str) -> tuple[str, str]:
    """A store, and a run whose actor writes ``text`` in a part and its note, and whose check
    finds ``text``."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"text": text}, note=text)

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.1, findings=[lw.Finding(text)])

    loop = lw.Loop(
        name="hostile",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="check")],
        contract=lw.Contract.from_dict({"budget": {"max_cycles": 2}}),
    )
    db = str(tmp_path / "s.db")
    with lw.Runtime(db) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"text": ""}}}, task_key="k")
    return db, r.run_id


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, str]:
    return _run_writing(tmp_path, HOSTILE)


@pytest.mark.parametrize("columns", ["200", "60"])
def test_show_and_runs_write_out_a_runs_terminal_controls(
    store: tuple[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    columns: str,
) -> None:
    db, run_id = store
    monkeypatch.setenv("COLUMNS", columns)
    for args in (["show", run_id], ["runs"]):
        assert main([*args, "--store", db]) == 0
        out = capsys.readouterr().out
        for raw in RAW:
            assert raw not in out, (args, raw)
    if columns == "200":  # the finding's line in the packet, written out whole
        assert main(["show", run_id, "--store", db]) == 0
        shown = capsys.readouterr().out
        assert f"• check: {WRITTEN}" in shown  # a finding on no part: the check that found it


def test_an_error_line_writes_out_terminal_controls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a store path is quoted as given, unlike a run id (which its message prints with repr)
    missing = f"{tmp_path}/no\x1b[2Jwhere\u202e.db"
    assert main(["show", "abc", "--store", missing]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\u202e" not in err
    assert "no\\x1b[2Jwhere\\u202e.db (from --store)" in err


# What the CLI writes as JSON (``--json``, ``trace``, ``export``) holds a run's text as valid
# JSON that reads back as the same value, and never hands a terminal a control it would act
# on: ESC and CR are JSON escapes anyway, and DEL, C1 controls, bidirectional controls and
# line or paragraph separators, which JSON allows raw, are written ``\uXXXX`` (the encoders
# keep to ASCII). ``show RUN --json`` of a model's text must not rewrite the reader's terminal.
JSON_HOSTILE = HOSTILE + " \x85 \u2066x\u2069\u2028\u2029 é 漢字 🙂"
JSON_RAW = (*RAW, "\x85", "\u2066", "\u2069", "\u2028", "\u2029")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


@pytest.mark.parametrize(
    ("args", "lines", "holds_text"),
    [
        (["show", "{run}", "--json"], False, True),
        (["runs", "--json"], False, False),
        (["diff", "{run}", "{run}", "--json"], False, False),
        (["trace", "{run}"], True, True),
        (["trace", "{run}", "--format", "otlp-json"], False, False),  # (attributes: JSON text)
        (["export", "eval-cases"], True, True),
    ],
)
def test_json_output_escapes_what_a_terminal_acts_on_and_reads_back_the_same(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    lines: bool,
    holds_text: bool,
) -> None:
    db, run_id = _run_writing(tmp_path, JSON_HOSTILE)
    assert main([a.format(run=run_id) for a in args] + ["--store", db]) == 0
    out = capsys.readouterr().out
    for raw in JSON_RAW:
        assert raw not in out, (args, raw)
    docs = [json.loads(line) for line in out.splitlines()] if lines else [json.loads(out)]
    if holds_text:  # the run's text, decoded, is the text the actor wrote
        assert any(s == JSON_HOSTILE for doc in docs for s in _strings(doc)), args
