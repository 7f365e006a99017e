"""SIGKILL on the stop-49 paths (kill49), real processes killed at deterministic points
(``expirykill/runner.py``: the engine's phase boundaries and the store calls it wraps; no
timing), SQLite and PostgreSQL: a worker recording a request expired, claiming the run and
escalating it (killed after the record, after the claim, inside the escalation's commit); a
person's decision and a worker's expiry record, one killed between them; a reuse-only effect
killed at each of its phases while its origin's refund runs; edit, rollback and cancel killed
with the lease taken. What each must keep: ``expirykill/trial.py``.

A trial is several processes (seconds each on a loaded machine): the suite plays a few;
``LW_EXPIRY_KILLS=N`` plays N spread over every trial, ``all`` every one
(``bench/expiry_kills.py`` plays them all, repeatedly, and counts)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "expirykill"))

from trial import all_trials, run_trial

# The suite's share: the escalation killed inside its commit (its packet written, not
# committed), then another worker's pass.
DEFAULT = [("expiry", ("commit_tx:1",))]


def chosen() -> list[tuple[str, tuple[str, ...]]]:
    ask = os.environ.get("LW_EXPIRY_KILLS", "")
    every = all_trials()
    if ask == "all":
        return every
    if ask.isdigit() and int(ask) > 0:
        step = max(1, len(every) // int(ask))
        return every[::step][: int(ask)]
    return DEFAULT


def test_every_trial_reaches_its_kill_points_in_the_trial_list() -> None:
    # each point a trial names is one its runner reports (a misspelt point kills nothing:
    # the trial then says "not killed where asked")
    from crashpoints.killpoint import PHASES

    named = {k.rpartition(":")[0] for _sc, ks in all_trials() for k in ks if k != "stop"}
    wrapped = {"read_expired", "expired", "claimed", "commit_tx", "lease", "decided"}
    journal = {p for p in named if p.startswith("journal_")}
    assert named <= {*PHASES, *wrapped, *journal}, named - {*PHASES, *wrapped, *journal}


@pytest.mark.parametrize(("scenario", "kills"), chosen())
def test_killed_on_the_expiry_reuse_and_lease_paths(
    url: str, tmp_path: Path, scenario: str, kills: tuple[str, ...]
) -> None:
    t = run_trial(tmp_path, url, scenario, kills)
    assert t.broken == [], t.steps
    assert t.killed >= len([k for k in kills if k]), t.steps  # each kill asked for happened
