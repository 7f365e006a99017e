"""A one-cycle loop whose held-out check is a sandboxed ``CommandVerifier`` reading the task's
``held_out.tests``: the loop of the self-reported held-out tests (stop 54's ``show`` and run
page, stop 55's counts, metrics and lists), and what the CLI prints of such runs."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import pytest

import loopwright as lw
from loopwright.verifiers import CommandVerifier
from support.printed import TextSink


def held_out_loop(
    actor: Callable[[lw.Context], lw.Proposal],
    visible: Callable[[lw.TaskState, lw.Proposal], lw.Verdict],
    *,
    judged_only: bool = False,
    **options: Any,
) -> lw.Loop:
    """``options``: more of the held-out ``CommandVerifier``'s (``isolate``,
    ``allow_unisolated``)."""
    return lw.Loop(
        name="held",
        actor=actor,
        verifiers=[
            lw.Check(fn=visible, name="visible"),
            lw.Check(
                fn=CommandVerifier(tests_key="held_out.tests", judged_only=judged_only, **options),
                name="hidden_tests",
                held_out=True,
            ),
        ],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )


def printed(fn: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, **kw: Any) -> str:
    """What a CLI command's function printed, at 250 columns (a row on one line)."""
    monkeypatch.setenv("COLUMNS", "250")
    sink, old = TextSink(), sys.stdout
    sys.stdout = sink
    try:
        fn(**kw)
    finally:
        sys.stdout = old
    return "".join(sink.parts)


def runs_text(url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """``loopwright runs --store URL``, printed."""
    from loopwright.cli import _app

    return printed(
        _app.runs,
        monkeypatch,
        store=url,
        status=None,
        project=None,
        loop=None,
        limit=None,
        all_=False,
        as_json=False,
    )


def metrics_text(url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """``loopwright metrics --store URL``, printed, its whitespace runs made one space."""
    from loopwright.cli._metrics_cmd import metrics

    out = printed(
        metrics,
        monkeypatch,
        store=url,
        project=None,
        loop=None,
        since=None,
        until=None,
        days=None,
        status=None,
        review_cost=None,
        per_run=False,
        as_json=False,
    )
    return " ".join(out.split())
