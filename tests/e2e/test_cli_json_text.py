"""What the CLI writes as JSON (``--json``, ``trace``, ``export``) holds a run's text as valid JSON
that reads back as the same value, and never hands a terminal a control it would act on: ESC
and CR are JSON escapes anyway, and DEL, C1 controls (0x9b is CSI on its own), bidirectional
controls and line or paragraph separators, which JSON allows raw, are written ``\\uXXXX`` (the
encoders keep to ASCII). Run on a terminal, ``show RUN --json`` of a model's text must not be
able to rewrite what the person reads, as its human output cannot (test_cli_terminal_text)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright.cli import main

HOSTILE = (
    "ok\x1b[2J\x1b]0;pwned\x07 \x9b31m \x85 \u202eevil\u2066x\u2069\x7f\rover\u2028\u2029 é 漢字 🙂"
)
RAW = (
    "\x1b",
    "\x07",
    "\x9b",
    "\x85",
    "\u202e",
    "\u2066",
    "\u2069",
    "\x7f",
    "\r",
    "\u2028",
    "\u2029",
)


@pytest.fixture
def store(tmp_path: Path) -> tuple[str, str]:
    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {"text": HOSTILE}, note=HOSTILE)

    def check(state: lw.TaskState, p: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.1, findings=[lw.Finding(HOSTILE)])

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
    store: tuple[str, str],
    capsys: pytest.CaptureFixture[str],
    args: list[str],
    lines: bool,
    holds_text: bool,
) -> None:
    db, run_id = store
    assert main([a.format(run=run_id) for a in args] + ["--store", db]) == 0
    out = capsys.readouterr().out
    for raw in RAW:
        assert raw not in out, (args, raw)
    docs = [json.loads(line) for line in out.splitlines()] if lines else [json.loads(out)]
    if holds_text:  # the run's text, decoded, is the text the actor wrote
        assert any(s == HOSTILE for doc in docs for s in _strings(doc)), args
