"""Seeded random runs of the stop contract (``support.stop_scenarios``): for every run a
scenario makes, replay under its own contract ends as it did, the stop reason keeps the
contract's table, the spend crosses a budget by at most the call in flight, ``show --json``'s
rows add up to the spend, and the metrics agree with the trace.

The property test draws a few seeds (``LOOPWRIGHT_SCENARIOS`` examples, 12 by default: a few
seconds); ``bench/stop_scenarios.py`` runs thousands. The regression tests below pin the
scenarios that broke a property (review49b), built by hand so that a change to the generator
does not change what they test.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from support.stop_scenarios import (
    CYCLE_CAP,
    Scenario,
    Step,
    check_run,
    play,
    play_and_check,
    run_seed,
    show_json,
)

import loopwright as lw
from loopwright._contract import contract_from_snapshot
from loopwright.replay import simulate, trace_of_run

EXAMPLES = int(os.environ.get("LOOPWRIGHT_SCENARIOS", "12"))


@settings(max_examples=EXAMPLES)
@given(st.integers(min_value=0, max_value=2**32 - 1))
@example(200615)  # stop 49's run that never ended: now ends at the default cycle ceiling
def test_every_scenario_keeps_the_stop_contract(seed: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        broken = run_seed(seed, str(Path(d) / "s.db"))
    assert not broken, f"seed {seed}:\n" + "\n".join(broken)


def _scenario(**kw: object) -> Scenario:
    base = Scenario(
        seed=0,
        steps=(Step("edit", 0.4, 0.1, 0),),
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
        check_cost=0.01,
        person_cost=0.0,
        held_cost=0.01,
        effect=None,
        effect_cost=0.0,
        person_start=1.0,
        pass_at=1.0,
        moves=(),
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def _all_hold(sc: Scenario, url: str, run_id: str) -> list[str]:
    broken: list[str] = []
    check_run(sc, url, run_id, broken.append)
    return broken


def test_show_lists_the_cycle_a_budget_ended_after_an_edit_stopped_again(tmp_path: Path) -> None:
    """A budget stops the run inside its first cycle ($0.10 of $0.10 after the actor: the
    check, not known free, does not start); a person edits it, and the resume stops again
    before judging the edit (that budget used up). ``show --json`` listed no row with the
    $0.10 (the cycle it ended inside was read from the newest ``stopped`` event only, which
    the second stop, between cycles, wrote without it): rows $0 beside a run of $0.10."""
    url = str(tmp_path / "s.db")
    sc = _scenario(contract=lw.Contract(budget=lw.Budget(max_cost_usd=0.1)), moves=("edit",))
    [run_id] = play(sc, url)
    with lw.Runtime(url) as rt:
        rec = rt.store.get_run(run_id)
    assert (rec.status, rec.stop_reason, rec.cycle) == ("stopped", "budget_cost", 0)
    assert rec.cost_usd == pytest.approx(0.1)
    rows = [c for c in show_json(url, run_id)["cycles"] if c.get("ended_inside")]
    assert [(c["cycle"], c["usage"]["cost_usd"]) for c in rows] == [(1, pytest.approx(0.1))]
    assert _all_hold(sc, url, run_id) == []


def _edited_fork(url: str, origin_cost: float) -> tuple[lw.RunRecord, lw.RunRecord]:
    """A run of one cycle (its cycle cap) forked at its end under a cap of 1 and a cost budget
    of $0.10: the fork stops before its first cycle; a person edits it and it is resumed."""
    sc = _scenario(steps=(Step("edit", 0.4, origin_cost, 0),))
    fork_contract = lw.Contract(budget=lw.Budget(max_cycles=1, max_cost_usd=0.1))
    with lw.Runtime(url) as rt:
        r = rt.run_sync(play_loop(sc), _task(), task_key="t")
        assert (r.stop_reason, r.cycles) == ("budget_cycles", 1)
        fork = rt.fork(r.run_id, 1, contract=fork_contract)
        f = rt.resume_sync(fork.run_id, play_loop(sc, fork_contract))
        assert (f.stop_reason, f.cycles) == ("budget_cycles", 1)
        rt.edit(fork.run_id, "doc/p", "0.5:ana", by="ana")
        rt.resume_sync(fork.run_id, play_loop(sc, fork_contract))
        return rt.store.get_run(r.run_id), rt.store.get_run(fork.run_id)


def play_loop(sc: Scenario, contract: lw.Contract | None = None) -> lw.Loop:
    from support.stop_scenarios import loop

    return loop(sc, contract)


def _task() -> dict[str, object]:
    return {"artifacts": {"doc": {"a": "0.0:0", "p": "1.0:0", "r": "", "n": ""}}}


def _replayed(url: str, rec: lw.RunRecord) -> tuple[str, int, float]:
    with lw.Runtime(url) as rt:
        trace = trace_of_run(rt.store, rec)
    assert trace is not None
    o = simulate(trace, contract_from_snapshot(rec.contract))
    return o.reason, o.cycles, o.cost_usd


def test_a_fork_edited_before_its_first_cycle_replays_to_its_used_up_budget(
    tmp_path: Path,
) -> None:
    """The fork inherits $0.12 of a $0.10 budget and its origin's cycle, its cap's one: it
    stops before its first cycle. Edited, its resume owes a check-only cycle, which the cap
    does not stop and the used-up cost budget does (``budget_cost``). Replay, seeing no cycle
    of the fork's, asked the checks before an actor's cycle: ``budget_cycles``."""
    url = str(tmp_path / "s.db")
    _, fork = _edited_fork(url, 0.1)  # (+ $0.01 and $0.01 of checks)
    assert (fork.status, fork.stop_reason, fork.cycle) == ("stopped", "budget_cost", 1)
    assert _replayed(url, fork) == ("budget_cost", 0, 0.0)


def test_a_fork_edited_before_its_first_cycle_replays_what_its_check_spent(
    tmp_path: Path,
) -> None:
    """The fork inherits $0.09 of its $0.10: its check-only cycle starts, its first check
    ($0.01) reaches the budget and the next billing one does not start: the run stops inside
    that cycle on ``budget_cost`` after $0.01. Replay stopped it before that cycle, on the cap
    (``budget_cycles``), spending nothing."""
    url = str(tmp_path / "s.db")
    _, fork = _edited_fork(url, 0.07)
    assert (fork.status, fork.stop_reason, fork.cycle) == ("stopped", "budget_cost", 1)
    own = fork.cost_usd - 0.09
    assert own == pytest.approx(0.01)
    reason, cycles, cost = _replayed(url, fork)
    assert (reason, cycles) == ("budget_cost", 0)
    assert cost == pytest.approx(own)


def test_a_fork_at_an_answered_questions_cycle_replays_its_edit_check_uncounted(
    tmp_path: Path,
) -> None:
    """Cycle 1 asks a question; a person answers it and edits a part beside it. A fork at
    cycle 1 (its state holds the answer, unread) edited again: its first cycle judges the
    edit check-only and takes the place of the cycle the answer is for, so the cap of 2 does
    not count it (``_edit_check.answer_owed``), and the actor's cycle 3 reads the answer.
    Replay counted such a cycle only after an asked cycle in the same trace: the fork's
    stopped on the cap after its check-only cycle, 1 cycle and $0.01 where the fork ran 2
    and spent $0.12."""
    url = str(tmp_path / "s.db")
    sc = _scenario(
        steps=(Step("question", 0.4, 0.1, 0), Step("edit", 0.5, 0.1, 0)),
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
        held_cost=None,
        person_start=0.6,
    )
    with lw.Runtime(url) as rt:
        r = rt.run_sync(play_loop(sc), _task(), task_key="q")
        assert r.status == "awaiting_approval"
        rt.edit(r.run_id, "doc/p", "0.7:ana", by="ana")
        rt.answer(r.run_id, "left", by="ana")
        r = rt.resume_sync(r.run_id, play_loop(sc))
        assert (r.stop_reason, r.cycles) == ("budget_cycles", 3)
        fork = rt.fork(r.run_id, 1, contract=sc.contract)
        rt.edit(fork.run_id, "doc/p", "0.8:bo", by="bo")
        f = rt.resume_sync(fork.run_id, play_loop(sc))
        assert (f.stop_reason, f.cycles) == ("budget_cycles", 3)
        rec = rt.store.get_run(fork.run_id)
    assert _replayed(url, rec) == ("budget_cycles", 2, pytest.approx(rec.cost_usd - 0.1))
    assert _all_hold(sc, url, fork.run_id) == []


def test_a_fork_past_its_lower_cap_says_no_edit_was_judged_unless_one_was(
    tmp_path: Path,
) -> None:
    """A run of 4 cycles forked at cycle 4 under a cap of 2 stops before its first cycle: its
    stop said "stopped after 4 cycles (2 of them judged people's edits, with no actor call: not
    counted)", though no one had edited anything (``_packet.edit_checks`` took every cycle past
    the cap for a check-only one; a fork inherits actor cycles past its cap). Edited, the fork's
    check-only cycle runs past the cap: that one is said, once."""
    url = str(tmp_path / "s.db")
    sc = _scenario(steps=(Step("edit", 0.5, 0.05, 0),), held_cost=None)
    capped = lw.Contract(budget=lw.Budget(max_cycles=2))
    with lw.Runtime(url) as rt:
        r = rt.run_sync(play_loop(sc, lw.Contract(budget=lw.Budget(max_cycles=4))), _task())
        assert (r.stop_reason, r.cycles) == ("budget_cycles", 4)
        fork = rt.fork(r.run_id, 4, contract=capped)
        rt.resume_sync(fork.run_id, play_loop(sc, capped))
        said = (rt.store.get_run(fork.run_id).packet or {})["stop_cause"]
        assert said.startswith("stopped after 4 cycles: the cycle budget of 2 is used up"), said
        rt.edit(fork.run_id, "doc/p", "0.7:ana", by="ana")
        f = rt.resume_sync(fork.run_id, play_loop(sc, capped))
        assert (f.stop_reason, f.cycles) == ("budget_cycles", 5)
        said = (rt.store.get_run(fork.run_id).packet or {})["stop_cause"]
    assert said.startswith(
        "stopped after 5 cycles (1 of them judged a person's edit, with no actor call: not "
        "counted): the cycle budget of 2 is used up"
    ), said


def test_seed_200615_ends_at_the_default_cycle_ceiling(tmp_path: Path) -> None:
    """Seed 200615 (stop49): a free actor scoring 0.9 of a required 1.0, a $0.01 check and a
    $0.50 budget its only exit. Cycle 1 accepts the actor's part (its checks pass, the score
    short of success), so every later proposal writes a part no longer the actor's to change:
    refused, no check run, $0 spent. The budget was never reached and the run never ended (the
    sweep ran 34 minutes and wrote 1.87 GB; the harness then stopped it at ``CYCLE_CAP``). A
    spend-only contract is now given the engine's default cycle ceiling (stop 50): the run
    ends ``budget_cycles`` at 1,000 cycles, before the harness's cap, and every property
    holds (replay under its snapshot, which holds the ceiling, ends as it did)."""
    url = str(tmp_path / "s.db")
    sc = _scenario(
        seed=200615,
        steps=(Step("edit", 0.9, 0.0, 0),),
        contract=lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cost_usd=0.5)),
        held_cost=None,
        pass_at=0.8,
        moves=("deny",),
    )
    assert sc.contract.spend_only and lw.DEFAULT_MAX_CYCLES < CYCLE_CAP
    assert play_and_check(sc, url) == []
    with lw.Runtime(url) as rt:
        [rec] = rt.store.list_runs()
    # only cycle 1's check paid
    assert (rec.status, rec.stop_reason, rec.cycle) == ("stopped", "budget_cycles", 1000)
    assert rec.cost_usd == pytest.approx(0.01)
    assert rec.contract["budget"]["max_cycles_default"] is True


def test_a_run_past_the_harness_cap_is_a_broken_property_not_a_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The harness's safety net: a run past ``CYCLE_CAP`` cycles is reported as the broken
    property "every run ends", at the same cycle every time (here a cap of 5 lowered from
    ``CYCLE_CAP``, under a contract of 20 cycles)."""
    from support import stop_scenarios

    monkeypatch.setattr(stop_scenarios, "CYCLE_CAP", 5)
    url = str(tmp_path / "s.db")
    sc = _scenario(
        steps=(Step("edit", 0.9, 0.0, 0),),
        contract=lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cycles=20)),
        held_cost=None,
        pass_at=0.8,
    )
    broken = play_and_check(sc, url)
    assert len(broken) == 1 and broken[0].startswith("a run that never ends"), broken
    assert "still going at cycle 6 (cap 5)" in broken[0]
    with lw.Runtime(url) as rt:
        [rec] = rt.store.list_runs()
    assert (rec.status, rec.cycle) == ("running", 5)


def test_an_attempt_past_the_cycle_cap_is_a_broken_property(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine and replay count the cycle cap with one rule (``_decide.counted_cycles``):
    an off-by-one there, one cycle more than the cap, is one replay agrees with, and the
    contract's table only asked that ``budget_cycles`` not come early. The harness counts the
    cap from the trace itself (review50b: with the rule mutated, 300 seeds stayed green)."""
    from loopwright import _decide

    sc = _scenario(
        steps=(Step("edit", 0.4, 0.0, 0),),
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
    )
    assert not play_and_check(sc, str(tmp_path / "ok.db"))
    monkeypatch.setattr(_decide, "counted_cycles", lambda s: s.cycle - s.answer_checks - 1)
    broken = play_and_check(sc, str(tmp_path / "off.db"))
    assert len(broken) == 1 and "cycle 4 was an attempt with the cycle cap reached" in broken[0]


def test_a_fork_that_never_ends_is_reported_with_its_own_contract(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seed 22706 (review50b): the first run stops at its cycle cap; a fork under a contract
    of a token budget alone, whose actor proposes what it proposed before (refused, no check
    run, nothing spent), went on for ever (it now ends at the default ceiling: stall50). A run
    past the harness's cap was reported with the first run's contract (``max_cycles=6``), not
    the fork's, the one that leaves no exit of its own (the harness's cap lowered below the
    default ceiling here)."""
    from support import stop_scenarios

    monkeypatch.setattr(stop_scenarios, "CYCLE_CAP", 20)
    sc = _scenario(
        steps=(Step("again", 0.8, 0.0, 0),),
        contract=lw.Contract(success=lw.Success(min_score=0.9), budget=lw.Budget(max_cycles=6)),
        person_cost=0.02,
        held_cost=0.03,
        pass_at=0.8,
        moves=("fork",),
        fork_contracts=(
            lw.Contract(success=lw.Success(min_score=0.8), budget=lw.Budget(max_tokens=500)),
        ),
    )
    broken = play_and_check(sc, str(tmp_path / "s.db"))
    assert len(broken) == 1 and broken[0].startswith("a run that never ends"), broken
    assert "max_tokens=500" in broken[0] and "max_cycles=6" not in broken[0], broken[0]


def test_an_attempt_begun_projected_to_cross_a_budget_is_a_broken_property(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "Never start a cycle it can already tell would cross": the engine and replay project
    the next cycle with one rule (``_decide.budget_stop``). With the projection gone, a run
    at $0.22 of $0.25 began another $0.22 cycle, crossed by less than that one call, and
    replay agreed: 400 seeds stayed green (review50b). The harness projects from the trace."""
    from loopwright import _decide

    sc = _scenario(
        steps=(Step("edit", 0.4, 0.2, 0),),
        contract=lw.Contract(budget=lw.Budget(max_cycles=5, max_cost_usd=0.25)),
    )
    assert not play_and_check(sc, str(tmp_path / "ok.db"))
    monkeypatch.setattr(_decide, "_mean_paid", lambda state, i, spent: 0.0)
    broken = play_and_check(sc, str(tmp_path / "off.db"))
    assert len(broken) == 1, broken
    assert "cycle 2 was begun projected to cross budget_cost (0.22 spent of 0.25)" in broken[0]


def _stops_at_most(contract: lw.Contract, state: lw.TaskState) -> str | None:
    """``_decide.marginal_stop`` with ``<`` flipped to ``<=``: a cycle worth exactly its cost
    stops the run."""
    from loopwright import _decide

    mr = contract.marginal_return
    if mr is None or state.cycle == 0:
        return None
    cost = _decide._mean_paid(state, 0, state.spent.cost_usd)
    worth = mr.p_success(state.cycle + 1, state.stall) * mr.value_per_success_usd
    return None if _decide.crosses(worth, cost) else "marginal_return"


@pytest.mark.parametrize(
    ("rule", "said"),
    [
        (_stops_at_most, "marginal_return where the rule goes on (P x value $0.1, expected"),
        (lambda contract, state: None, "cycle 3 was begun with P x value $0.08 below its"),
    ],
    ids=["at-most", "never"],
)
def test_a_stop_the_marginal_return_rule_does_not_make_is_a_broken_property(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rule: object, said: str
) -> None:
    """The engine and replay decide marginal return with one rule (``_decide.marginal_stop``):
    with it mutated, the run stops where replay says it stops, and the contract's table named
    no condition for ``marginal_return``. The harness re-decides it from the trace (docs/
    replay.md): $0.10 cycles, a success worth $0.40; after cycle 1 (an improvement) P is 0.25,
    worth exactly the cost (goes on: "below"), after cycle 2 (none) 0.2, worth $0.08 (stops).
    With ``<`` flipped to ``<=`` the run stopped after cycle 1; with the rule gone it ran on
    to its cycle cap."""
    from loopwright import _decide

    sc = _scenario(
        steps=(Step("edit", 0.4, 0.1, 0),),
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=5),
            marginal_return=lw.MarginalReturn(value_per_success_usd=0.4),
        ),
        check_cost=0.0,
        held_cost=None,
    )
    url = str(tmp_path / "ok.db")
    assert not play_and_check(sc, url)
    with lw.Runtime(url) as rt:
        [rec] = rt.store.list_runs()
    assert (rec.stop_reason, rec.cycle) == ("marginal_return", 2)
    monkeypatch.setattr(_decide, "marginal_stop", rule)
    broken = play_and_check(sc, str(tmp_path / "off.db"))
    assert len(broken) == 1 and said in broken[0], broken


def _strictly_above(level: float | None, score: float | None, delta: float, newly: bool) -> bool:
    """``_decide.improved`` with a rise of exactly ``min_delta`` no longer counting."""
    base = 0.0 if level is None else level
    return newly or (score is not None and score - base > delta + 1e-9)


def _any_rise(level: float | None, score: float | None, delta: float, newly: bool) -> bool:
    """``_decide.improved`` with ``min_delta`` left out: any rise is progress."""
    return newly or (score is not None and score > (level or 0.0))


@pytest.mark.parametrize(
    ("scores", "rule", "ends", "said"),
    [
        ((0.4, 0.8, 0.8), _strictly_above, 3, "no_progress after 0 cycles without progress"),
        ((0.4, 0.6), _any_rise, 2, "cycle 3 was begun after 1 without progress"),
    ],
    ids=["exactly-min-delta", "min-delta-gone"],
)
def test_a_plateau_the_no_progress_rule_does_not_see_is_a_broken_property(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    scores: tuple[float, ...],
    rule: object,
    ends: int,
    said: str,
) -> None:
    """The engine and replay judge a material improvement with one rule
    (``_decide.improved``): with it mutated, the run stops ``no_progress`` where replay says,
    a cycle early or late. The harness re-judges progress from the trace's scores (docs/
    concepts.md: a rise of exactly ``min_delta`` counts; less does not). The score is the mean
    of the actor's part's check and the person's part's (1.0): 0.7 then 0.9 is a rise of 0.2,
    progress, and the run ends at cycle 3, unless the rule wants more (it ended at cycle 2);
    0.7 then 0.8 is none, and the run ends at cycle 2, unless the rule forgets ``min_delta``
    (it began cycle 3)."""
    from loopwright import _decide

    sc = _scenario(
        steps=tuple(Step("edit", x, 0.0, 0) for x in scores),
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=5), no_progress=lw.NoProgress(cycles=1, min_delta=0.2)
        ),
        held_cost=None,
    )
    url = str(tmp_path / "ok.db")
    assert not play_and_check(sc, url)
    with lw.Runtime(url) as rt:
        [rec] = rt.store.list_runs()
    assert (rec.stop_reason, rec.cycle) == ("no_progress", ends)
    monkeypatch.setattr(_decide, "improved", rule)
    broken = play_and_check(sc, str(tmp_path / "off.db"))
    assert len(broken) == 1 and said in broken[0], broken
