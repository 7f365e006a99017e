"""What a governed cycle builds: the engine's own objects are built by position or by plain
slot stores, never by a class call with keywords, which goes through a dict of them (about a
microsecond for a dozen; bench/RESULTS.md, "2026-12-04 (stop 40)")."""

from __future__ import annotations

import asyncio
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright._proposal import Context, Remaining
from loopwright._state import Digests, Part
from loopwright.store._base import CommitRequest

CLASSES: tuple[type, ...] = (Context, Remaining, CommitRequest, Digests, Part, lw.Proposal)


def _trivial_run_counting(db: Path, watch: Any) -> None:
    """The trivial loop (the actor writes a part, the check rejects it with one finding that
    names no verifier) for 7 cycles, ``watch(True)`` from the 2nd actor call to the 6th
    (cycles 2 to 5) and ``watch(False)`` after."""
    seen: list[int] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        seen.append(ctx.cycle)
        watch(2 <= len(seen) < 6)
        return lw.Proposal.edit("doc", {"body": f"draft {ctx.cycle}"})

    def verifier(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(False, 0.5, (lw.Finding("still open", "doc", "body", "text"),))

    loop = lw.Loop(
        name="builds",
        actor=actor,
        verifiers=[lw.Check(fn=verifier, name="check")],
        contract=lw.Contract(budget=lw.Budget(max_cycles=7)),
    )
    task = {"goal": "g", "artifacts": {"doc": {"body": "", "title": "t"}}}
    with lw.Runtime(str(db)) as rt:
        r = asyncio.run(rt.run(loop, task, task_key="k"))
        assert r.cycles == 7
        # the findings the actor is shown name their check, as ever
        last = rt.store.latest_checkpoint(r.run_id).state["findings"]
        assert [f["verifier"] for f in last] == ["check"]


def _profiled_cycles(db: Path, profile: Any) -> None:
    """``_trivial_run_counting`` with ``profile`` (``sys.setprofile``'s) on cycles 2 to 5."""

    def watch(now: bool) -> None:
        sys.setprofile(profile if now else None)

    try:
        _trivial_run_counting(db, watch)
    finally:
        sys.setprofile(None)


def test_a_cycle_calls_no_engine_class_with_keywords(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    counting = [False]
    by_keyword: Counter[str] = Counter()
    built: Counter[str] = Counter()

    for cls in CLASSES:
        init = cls.__init__

        def counted(self: Any, *args: Any, __init: Any = init, **kwargs: Any) -> None:
            if counting[0]:
                built[type(self).__name__] += 1
                if kwargs:
                    by_keyword[type(self).__name__] += 1
            __init(self, *args, **kwargs)

        monkeypatch.setattr(cls, "__init__", counted)

    def watch(now: bool) -> None:
        counting[0] = now

    _trivial_run_counting(tmp_path / "x.db", watch)
    # what a cycle builds of these: its context, the budget left, its commit request, a
    # check's copy of the rejected digests, the actor's proposal
    assert built["Context"] == built["CommitRequest"] == built["Proposal"] == 4, built
    assert by_keyword == Counter()


_COMPREHENSIONS = frozenset(("<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>"))


def _comprehensions_a_cycle(db: Path) -> float:
    """Calls of the engine's comprehensions and generator expressions (each resume of a
    generator counts) in cycles 2 to 5 of the trivial loop, a cycle."""
    home = os.path.dirname(lw.__file__)
    calls = [0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        code = frame.f_code
        if (
            event == "call"
            and code.co_name in _COMPREHENSIONS
            and code.co_filename.startswith(home)
        ):
            calls[0] += 1

    _profiled_cycles(db, profile)
    return calls[0] / 4


def test_a_cycle_builds_few_comprehensions(tmp_path: Path) -> None:
    # Each comprehension or generator expression builds a function (and a generator) every
    # time it runs: over the one or two items of a cycle's lists that cost more than the
    # work. 68 a cycle before these cuts (bench/RESULTS.md, stop 40), 10 after, 1 after the
    # second pass ("engine CPU, second pass": the proposal's digest, edits and record, the
    # checks newly passing, accept_clean_parts's targets, the recall query, tagged findings).
    assert _comprehensions_a_cycle(tmp_path / "x.db") <= 3


def test_a_cycle_builds_its_record_packed(tmp_path: Path) -> None:
    # A cycle that goes on builds its record in the stored form (``_record_codec.packed_*``)
    # instead of the whole record copied and pruned by ``pack`` (seven droppers a trivial
    # cycle, each a dict copied: about 5 % of the engine's CPU, bench/RESULTS.md "stop 41").
    # What was left, a dropper for each priced call (the calls come from the journal as
    # dicts), is gone for a call that billed nothing: its row packs to its ``who`` alone,
    # built directly (``_exec.cycle_calls``, bench/RESULTS.md "stop 52").
    dropped = [0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        code = frame.f_code
        if event == "call" and code.co_name == "drop" and code.co_filename == "<string>":
            dropped[0] += 1

    _profiled_cycles(tmp_path / "x.db", profile)
    assert dropped[0] / 4 == 0  # (the actor's call and the check's: 2 before stop 52)


def test_a_cycle_checks_its_verdict_and_finding_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The check's findings name no verifier: the engine tags them with the check's name. The
    # tagged finding and verdict were built by their classes, their checks run again on what
    # the check's own verdict had passed (two of each a cycle); now by plain slot stores.
    on = [False]
    checked: Counter[str] = Counter()
    for cls in (lw.Verdict, lw.Finding):
        post = cls.__post_init__

        def counted(self: Any, __post: Any = post) -> None:
            if on[0]:
                checked[type(self).__name__] += 1
            __post(self)

        monkeypatch.setattr(cls, "__post_init__", counted)

    def watch(now: bool) -> None:
        on[0] = now

    _trivial_run_counting(tmp_path / "x.db", watch)
    assert checked == Counter({"Verdict": 4, "Finding": 4})  # the check's own, once a cycle


def test_a_cycle_builds_an_artifact_only_where_it_copies_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A cycle copies its one artifact twice (the candidate, the check's copy); ``set_part``
    # built a third (``setdefault``'s default) and threw it away.
    from loopwright._parts import Artifact

    on = [False]
    built = [0]
    init = Artifact.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        if on[0]:
            built[0] += 1
        init(self, *args, **kwargs)

    monkeypatch.setattr(Artifact, "__init__", counted)

    def watch(now: bool) -> None:
        on[0] = now

    _trivial_run_counting(tmp_path / "x.db", watch)
    assert built[0] == 2 * 4


@pytest.mark.parametrize(("method", "a_cycle"), [("owned", 1), ("changes", 2)])
def test_a_cycle_asks_its_proposal_once_for_what_it_reads_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str, a_cycle: int
) -> None:
    # ``Proposal.owned`` of a proposal nothing can change returns it: the engine's copy is the
    # actor's proposal, and so is the check's. It was asked twice a cycle (the engine's copy,
    # the check's); the check's now follows the first answer. ``changes`` (a new list each
    # call) was asked three times: the logged proposal, the protected parts, the candidate;
    # the last two share one.
    on = [False]
    asked = [0]
    real = getattr(lw.Proposal, method)

    def counted(self: lw.Proposal) -> Any:
        if on[0]:
            asked[0] += 1
        return real(self)

    monkeypatch.setattr(lw.Proposal, method, counted)

    def watch(now: bool) -> None:
        on[0] = now

    _trivial_run_counting(tmp_path / "x.db", watch)
    assert asked[0] == 4 * a_cycle


def test_a_cycle_boundary_makes_no_coroutine_that_would_return_at_once(tmp_path: Path) -> None:
    # Between two cycles of a run with no commit in flight and no reflector, ``_settle`` and
    # ``_reflect`` returned at once, having done nothing: each was a coroutine made and
    # awaited every cycle (a coroutine call costs about three plain calls); and the recall of
    # a run that reads its memory alone awaits nothing either (``_recall_now``).
    home = os.path.dirname(lw.__file__)
    made: Counter[str] = Counter()

    def profile(frame: Any, event: str, arg: Any) -> None:
        code = frame.f_code
        if (
            event == "call"
            and code.co_name in ("_settle", "_reflect", "_recall")
            and code.co_filename.startswith(home)
        ):
            made[code.co_name] += 1

    _profiled_cycles(tmp_path / "x.db", profile)
    assert made == Counter()
