"""A contract whose only exits besides success are spend budgets is given the engine's default
cycle ceiling where a run is given it (stop 50; stop 49's seed 200615 of the stop-scenario
generator: an accepted part proposed again, refused, $0 a cycle, ran for ever under
``max_cost_usd`` alone). The ceiling is written into the contract (``budget.max_cycles`` =
``DEFAULT_MAX_CYCLES``, marked ``max_cycles_default``), so the run's snapshot, ``show``, replay
and the metrics see an ordinary ``budget_cycles`` stop; building the ``Loop`` says so once, at
INFO."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

import loopwright as lw
from loopwright._compare import merge_contract
from loopwright._contract import contract_from_snapshot
from loopwright._decide import cycle_cap, remaining
from loopwright._packet import build_packet, explain, stop_cause
from loopwright.cli._check import review


def _loop(contract: lw.Contract) -> lw.Loop:
    return lw.Loop(
        name="money-only",
        actor=lambda ctx: lw.Proposal.edit("doc", {"a": "x"}),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0), name="c")],
        contract=contract,
    )


SPEND_ONLY = [
    lw.Budget(max_cost_usd=0.5),
    lw.Budget(max_tokens=1000),
    lw.Budget(max_cost_usd=1, max_tokens=9),
]


def test_the_default_ceiling_is_a_thousand_cycles() -> None:
    assert lw.DEFAULT_MAX_CYCLES == 1_000


@pytest.mark.parametrize("budget", SPEND_ONLY, ids=["cost", "tokens", "both"])
def test_a_spend_only_contract_is_given_the_default_ceiling_when_its_loop_is_built(
    budget: lw.Budget, caplog: pytest.LogCaptureFixture
) -> None:
    contract = lw.Contract(budget=budget)
    assert contract.spend_only
    with caplog.at_level(logging.INFO, logger="loopwright.runs"):
        loop = _loop(contract)
    b = loop.contract.budget
    assert (b.max_cycles, b.max_cycles_default) == (lw.DEFAULT_MAX_CYCLES, True)
    assert (b.max_cost_usd, b.max_tokens) == (budget.max_cost_usd, budget.max_tokens)
    assert not loop.contract.spend_only
    said = [r for r in caplog.records if r.name == "loopwright.runs"]
    assert [r.levelno for r in said] == [logging.INFO]  # once, and no warning any more
    text = said[0].getMessage()
    assert "'money-only'" in text and "default ceiling of 1,000 cycles" in text
    assert "set budget.max_cycles, max_seconds or a no_progress rule" in text


@pytest.mark.parametrize(
    "contract",
    [
        lw.Contract(budget=lw.Budget(max_cost_usd=0.5, max_cycles=10)),
        lw.Contract(budget=lw.Budget(max_cost_usd=0.5, max_seconds=60)),
        lw.Contract(budget=lw.Budget(max_cost_usd=0.5), no_progress=lw.NoProgress(cycles=3)),
        lw.Contract(budget=lw.Budget(max_cycles=5)),
        lw.Contract(budget=lw.Budget(max_cycles=9, max_cycles_key="limits.cycles")),
    ],
    ids=["cycles", "seconds", "no-progress", "no-money", "task-cap-and-cycles"],
)
def test_a_contract_with_another_exit_is_given_as_it_is(
    contract: lw.Contract, caplog: pytest.LogCaptureFixture
) -> None:
    assert not contract.spend_only
    with caplog.at_level(logging.INFO, logger="loopwright.runs"):
        loop = _loop(contract)
    assert loop.contract is contract
    assert contract.with_default_ceiling() is contract
    assert [r for r in caplog.records if r.name == "loopwright.runs"] == []


def test_the_ceiling_is_in_the_snapshot_and_an_older_snapshot_loads_as_it_was() -> None:
    given = lw.Contract(budget=lw.Budget(max_cost_usd=0.5)).with_default_ceiling()
    snap = given.to_dict()
    assert snap["budget"]["max_cycles"] == 1000 and snap["budget"]["max_cycles_default"] is True
    again = contract_from_snapshot(snap)
    assert again == given and again.with_default_ceiling() is again  # resumed as stored
    # a snapshot an earlier release wrote: no such key; read, written and compared unchanged
    old = lw.Contract(budget=lw.Budget(max_cost_usd=0.5)).to_dict()
    assert "max_cycles_default" not in old["budget"]
    loaded = contract_from_snapshot(old)
    assert loaded.budget.max_cycles_default is False and loaded.to_dict() == old
    # an author's own cap of 1,000 is not the default one
    own = lw.Contract(budget=lw.Budget(max_cost_usd=0.5, max_cycles=1000))
    assert "max_cycles_default" not in own.to_dict()["budget"]
    assert own != given


def test_a_default_ceiling_gives_way_to_an_exit_the_author_chose() -> None:
    """A fork's contract laid over its origin's (``merge_contract``, as ``loopwright fork
    --contract`` and the dashboard's rerun make it)."""
    snap = lw.Contract(budget=lw.Budget(max_cost_usd=0.5)).with_default_ceiling().to_dict()
    cap = contract_from_snapshot(merge_contract(snap, {"budget": {"max_cycles": 50}}))
    assert (cap.budget.max_cycles, cap.budget.max_cycles_default) == (50, False)
    assert cap.with_default_ceiling() is cap
    plateau = contract_from_snapshot(merge_contract(snap, {"no_progress": {"cycles": 3}}))
    bare = plateau.with_default_ceiling()
    assert (bare.budget.max_cycles, bare.budget.max_cycles_default) == (None, False)
    assert bare.no_progress == lw.NoProgress(cycles=3)
    # as a person's changes are laid over it (merge_contract: a fork's file, a rerun): max_cycles
    # cleared (the rerun form's empty box) is the default again; a 1000 written is theirs
    cleared = contract_from_snapshot(merge_contract(snap, {"budget": {"max_cycles": None}}))
    b = cleared.with_default_ceiling().budget
    assert (b.max_cycles, b.max_cycles_default) == (1000, True)
    written = contract_from_snapshot(merge_contract(snap, {"budget": {"max_cycles": 1000}}))
    b = written.with_default_ceiling().budget
    assert (b.max_cycles, b.max_cycles_default) == (1000, False)
    left = contract_from_snapshot(merge_contract(snap, {"budget": {"max_cost_usd": 0.25}}))
    assert left.with_default_ceiling().budget.max_cycles_default
    # the money cleared too, the ceiling is its only exit: kept
    alone = contract_from_snapshot(merge_contract(snap, {"budget": {"max_cost_usd": None}}))
    assert alone.with_default_ceiling() is alone
    with pytest.raises(lw.ConfigError, match="true or false"):
        lw.Budget(max_cycles=1000, max_cycles_default="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "beside",
    [{}, {"max_seconds": 60}, {"max_cost_usd": 0.25}],
    ids=["alone", "time-budget", "money-changed"],
)
def test_a_cap_of_1000_laid_over_the_default_ceiling_is_the_authors(
    beside: dict[str, float],
) -> None:
    """``loopwright fork --contract``, a rerun in the API: a ``max_cycles = 1000`` the person
    wrote over a spend-only run's snapshot kept the snapshot's mark of the default ceiling, so
    beside a time budget the fork's ``with_default_ceiling`` dropped it as the ceiling the new
    exit replaces: the fork ran with no cycle cap (999 was kept). Stop 51, review51a."""
    snap = lw.Contract(budget=lw.Budget(max_cost_usd=0.5)).with_default_ceiling().to_dict()
    for cap in (999, 1000, 1001):
        laid = merge_contract(snap, {"budget": {"max_cycles": cap, **beside}})
        given = contract_from_snapshot(laid).with_default_ceiling()
        b = given.budget
        assert (b.max_cycles, b.max_cycles_default) == (cap, False), (cap, b)
        assert "max_cycles_default" not in given.to_dict()["budget"]
    # changes that leave max_cycles alone leave the mark: the ceiling stays the default
    kept = contract_from_snapshot(merge_contract(snap, {"budget": {"max_cost_usd": 0.25}}))
    assert (kept.budget.max_cycles, kept.budget.max_cycles_default) == (1000, True)


def test_a_stop_at_the_default_ceiling_says_so_and_what_to_set() -> None:
    given = _loop(lw.Contract(budget=lw.Budget(max_cost_usd=0.5))).contract
    state = lw.TaskState(task={})
    state.cycle = 1000
    packet = build_packet("budget_cycles", state, given, run_id="r" * 16)
    choose = "set budget.max_cycles, max_seconds or a no_progress rule"
    assert packet["summary"].startswith("stopped: the default cycle ceiling (1,000) is spent")
    assert packet["stop_cause"].startswith(
        "stopped after 1000 cycles: the default cycle ceiling of 1,000 is used up"
    )
    assert packet["recommended_action"].startswith("The default cycle ceiling ended the run")
    for text in (packet["summary"], packet["stop_cause"], packet["recommended_action"]):
        assert choose in text, text
    # an author's own cap of 1,000 is said as any cap
    own = lw.Contract(budget=lw.Budget(max_cost_usd=0.5, max_cycles=1000))
    assert explain("budget_cycles", own) == "stopped: the cycle budget (1000) is spent"
    said = stop_cause("budget_cycles", own, cycle=1000)
    assert "default" not in said and choose not in said


def test_check_says_only_the_default_ceiling_ends_a_stalled_run() -> None:
    loop = _loop(lw.Contract(budget=lw.Budget(max_cost_usd=2.0)))
    (answer,) = [a for a in review(loop) if a["question"] == "What ends a stalled or unsafe run?"]
    assert answer["status"] == "warn"
    assert answer["answer"].startswith(
        "$2.00 spent; a stalled run whose cycles spend nothing: only the default ceiling of "
        "1,000 cycles (set budget.max_cycles, max_seconds or a no_progress rule to choose its "
        "end); no plateau exit"
    ), answer["answer"]
    own = _loop(lw.Contract(budget=lw.Budget(max_cost_usd=2.0, max_cycles=1000)))
    (answer,) = [a for a in review(own) if a["question"] == "What ends a stalled or unsafe run?"]
    assert answer["answer"].startswith("1000 cycles; $2.00 spent; no plateau exit")


def test_a_loop_replaced_keeps_its_ceiling() -> None:
    loop = _loop(lw.Contract(budget=lw.Budget(max_tokens=10)))
    again = dataclasses.replace(loop, name="again")
    assert again.contract == loop.contract and again.contract.budget.max_cycles_default


def test_a_task_cap_alone_is_refused_saying_why() -> None:
    """A contract whose only limit is ``max_cycles_key`` was refused with "set a budget
    (max_cycles, …)", which never said why the key it had was not one (review49b)."""
    with pytest.raises(lw.ConfigError) as err:
        lw.Contract(budget=lw.Budget(max_cycles_key="limits.cycles"))
    said = str(err.value)
    assert "no exit besides success" in said
    assert "max_cycles_key 'limits.cycles' alone is not one" in said
    assert "a task without that key would run without a limit" in said


def test_a_task_cap_beside_spend_budgets_only_falls_back_to_the_default_ceiling() -> None:
    """``max_cycles_key`` beside money only is not ``spend_only``: a task without the key ran
    with no cycle limit (stall50's open end). Such a run is given the default ceiling as the
    cap of a task without its own; a task carrying one keeps it, not lowered to the ceiling."""
    keyed = lw.Contract(budget=lw.Budget(max_cost_usd=0.5, max_cycles_key="limits.cycles"))
    assert not keyed.spend_only and keyed.wants_default_ceiling
    given = _loop(keyed).contract
    b = given.budget
    assert (b.max_cycles, b.max_cycles_default, b.max_cycles_key) == (1000, True, "limits.cycles")
    assert given.with_default_ceiling() is given
    assert contract_from_snapshot(given.to_dict()) == given
    bare, own, big = ({}, {"limits": {"cycles": 7}}, {"limits": {"cycles": 1500}})
    caps = [cycle_cap(given, lw.TaskState(task=t)) for t in (bare, own, big)]
    assert caps == [1000, 7, 1500]
    assert remaining(given, lw.TaskState(task=bare)).cycles == 1000
    (answer,) = [
        a for a in review(_loop(keyed)) if a["question"] == "What ends a stalled or unsafe run?"
    ]
    assert answer["answer"].startswith(
        "the task's own cycle cap (limits.cycles); $0.50 spent; a stalled run whose cycles "
        "spend nothing (of a task without its own cap): only the default ceiling of 1,000"
    ), answer["answer"]


MARKED = "[contract.budget]\nmax_cycles = 1000\nmax_cycles_default = true\nmax_seconds = 60\n"


def test_the_default_ceilings_mark_is_refused_in_a_users_contract(tmp_path: Path) -> None:
    """``budget.max_cycles_default`` is the engine's mark, not a setting: written in a spec or a
    contract file, it was accepted, and beside another exit it dropped the author's own
    ``max_cycles = 1000`` (the loop ran with no cycle cap). A stored snapshot still loads it."""
    from loopwright.replay import load_contract
    from loopwright.replay._report import contract_tables

    spec = tmp_path / "loop.toml"
    spec.write_text(
        'name = "marked"\n[actor]\nref = "m.py:actor"\n[[verifiers]]\nref = "m.py:check"\n'
        "[contract.success]\nmin_score = 1.0\n" + MARKED
    )
    (tmp_path / "m.py").write_text(
        "import loopwright as lw\n"
        "def actor(ctx):\n    return lw.Proposal.edit('doc', {'a': 'x'})\n"
        "def check(state, proposal):\n    return lw.Verdict(passed=True, score=1.0)\n"
    )
    with pytest.raises(lw.SpecError) as err:
        lw.load_spec(spec)
    assert err.value.field == "contract.budget.max_cycles_default"
    assert "the engine's mark" in str(err.value) and "budget.max_cycles" in str(err.value)
    tables = tmp_path / "c.toml"
    tables.write_text(MARKED)
    for read in (load_contract, contract_tables):
        with pytest.raises(lw.ConfigError) as err2:
            read(tables)
        assert "max_cycles_default" in str(err2.value) and str(tables) in str(err2.value)
    snapshot = _loop(lw.Contract(budget=lw.Budget(max_cost_usd=1.0))).contract.to_dict()
    assert contract_from_snapshot(snapshot).budget.max_cycles_default  # (a run's snapshot)
    with pytest.raises(lw.ConfigError) as err3:  # the public reader is a person's (Python)
        lw.Contract.from_dict(snapshot)
    assert err3.value.field == "contract.budget.max_cycles_default"


def test_the_default_ceilings_mark_is_refused_in_a_budget_built_in_python() -> None:
    """A ``Budget(max_cycles_default=True)`` a caller built was taken at their word (stall51):
    beside another exit ``with_default_ceiling`` then dropped their own ``max_cycles = 1000``
    and the loop ran with no cycle cap, as the refused spec key did. The engine's own marks
    (a run given the ceiling, a snapshot loaded, a marked budget replayed) still build."""
    for given in ({"max_cycles": 1000, "max_seconds": 60}, {"max_cost_usd": 1.0}, {}):
        with pytest.raises(lw.ConfigError) as err:
            lw.Budget(max_cycles_default=True, **given)  # type: ignore[arg-type]
        assert err.value.field == "contract.budget.max_cycles_default"
        assert "the engine's mark" in str(err.value) and "budget.max_cycles" in str(err.value)
    marked = _loop(lw.Contract(budget=lw.Budget(max_cost_usd=0.5))).contract
    assert marked.budget.max_cycles_default
    with pytest.raises(lw.ConfigError, match="max_cycles_default=False"):
        dataclasses.replace(marked.budget, max_cost_usd=2.0)
    mine = dataclasses.replace(marked.budget, max_cost_usd=2.0, max_cycles_default=False)
    assert (mine.max_cycles, mine.max_cycles_default) == (1000, False)
    assert contract_from_snapshot(marked.to_dict()) == marked
    keyed = _loop(lw.Contract(budget=lw.Budget(max_cost_usd=0.5, max_cycles_key="k"))).contract
    from loopwright.replay._format import RunTrace
    from loopwright.replay._simulate import _own_budget

    bare = _own_budget(RunTrace(run_id="r", task_key="t", cycles=()), keyed).budget
    assert (bare.max_cycles, bare.max_cycles_default, bare.max_cycles_key) == (1000, True, None)


def test_the_actor_and_a_models_prompt_see_the_default_ceiling_count_down(
    tmp_path: Path,
) -> None:
    """Under a spend-only contract ``ctx.remaining.cycles`` is the default ceiling's count (it
    was ``None``, "unlimited", before stop 50), and a model adapter's prompt says it: the run
    does end there, so it is a real limit, shown as any cycle budget is (stall50b)."""
    from loopwright.adapters._prompt import context_sections

    seen: list[int | None] = []
    shown: list[str] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        seen.append(ctx.remaining.cycles)
        shown.append(context_sections(ctx)["remaining"])
        return lw.Proposal.edit("doc", {"a": f"x{ctx.cycle}"})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        done = state.values()["doc"]["a"] == "x3"
        return lw.Verdict(passed=done, score=1.0 if done else 0.5)

    loop = lw.Loop(
        name="counted",
        actor=actor,
        verifiers=[lw.Check(fn=check, name="c")],
        contract=lw.Contract(success=lw.Success(min_score=1.0), budget=lw.Budget(max_cost_usd=1.0)),
    )
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": ""}}}, task_key="t")
    assert (r.status, r.cycles) == ("accepted", 3)
    assert seen == [1000, 999, 998]
    assert shown[0] == "1000 cycle(s), $1.0000" and shown[2].startswith("998 cycle(s)")
