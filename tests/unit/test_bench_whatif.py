"""bench/cycle_whatif.py: its what-ifs take away what they name, and ``--time`` measures."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loopwright import _checkpoint, _cycle

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def whatif(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.syspath_prepend(str(BENCH))
    # what the pieces replace, put back after the test
    for name in ("redact", "redact_unique"):
        monkeypatch.setattr(_checkpoint, name, getattr(_checkpoint, name))
    monkeypatch.setattr(_cycle, "redact", _cycle.redact)
    import cycle_whatif

    return cycle_whatif


def test_without_redact_stubs_the_commit_records_scan_too(whatif: Any) -> None:
    # A commit with a record is masked by ``redact_unique`` (stop 46): a what-if that stubbed
    # ``redact`` alone left the commit's scan in and priced the net at its verdicts only.
    whatif.PIECES["redact"][0]()
    assert _checkpoint.redact is whatif._same
    assert _checkpoint.redact_unique is whatif._same
    assert _cycle.redact is whatif._same


def test_abba_order_puts_each_tree_first_as_often() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import cycle_whatif
    finally:
        sys.path.remove(str(BENCH))
    order = cycle_whatif._order(8)
    assert order.count(0) == order.count(1) == 8
    firsts = [order[i] for i in range(0, len(order), 2)]
    assert firsts.count(0) == firsts.count(1)


def test_time_prints_the_run_and_the_steady_figures() -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(_cycle.__file__).parents[1]))
    out = subprocess.run(
        [sys.executable, str(BENCH / "cycle_whatif.py"), "40", "--time"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    figures = dict(line.split("=") for line in out.splitlines() if "=" in line)
    assert float(figures["engine_us_per_cycle"]) > 0
    assert float(figures["steady_us_per_cycle"]) > 0


def test_without_env_stubs_the_environment_check_of_every_redaction(
    whatif: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The registry split from ``_redact`` (split55b): its ``secret_values`` (``redact_text``, and
    # ``redact`` once a secret is registered) read the registry's ``env_secrets``, which a
    # what-if that rebound ``_redact.env_secrets`` alone left in (review55b).
    from loopwright import _redact, _redact_registry

    monkeypatch.setattr(_redact, "env_secrets", _redact.env_secrets)
    monkeypatch.setattr(_redact_registry, "env_secrets", _redact_registry.env_secrets)
    monkeypatch.setenv("WHATIF_API_KEY", "whatif-env-value-9f3k")
    assert "whatif-env-value-9f3k" not in _redact.redact_text("x whatif-env-value-9f3k")
    whatif.PIECES["env"][0]()
    assert _redact.redact_text("x whatif-env-value-9f3k") == "x whatif-env-value-9f3k"
    assert _redact.redact({"m": "x whatif-env-value-9f3k"}) == {"m": "x whatif-env-value-9f3k"}


@pytest.mark.parametrize("piece", ["copies", "detach"])
def test_the_copies_what_ifs_replace_the_name_the_cycle_reads(
    whatif: Any, monkeypatch: pytest.MonkeyPatch, piece: str
) -> None:
    # They set ``_cycle._copies``, which the cycle stopped reading when the candidate's state
    # moved to ``_candidate_state.verifier_copies`` (stop 54): the what-if measured nothing.
    monkeypatch.setattr(_cycle, "verifier_copies", _cycle.verifier_copies)
    before = _cycle.verifier_copies
    whatif.PIECES[piece][0]()
    assert _cycle.verifier_copies is not before
