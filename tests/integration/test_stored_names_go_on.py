"""A run an earlier release started under a verifier, effect and risk-rule name that tidy49's
rule now refuses (an invisible character) is resumed, continued and forked with the loop that
declares it (review49c), SQLite and PostgreSQL.

tidy49 refused such names where a ``Check``, an effect or a ``Loop`` is built, so the loop a
stored run needs could not be written any more: a run parked on an approved payment of
``pay\\u200b`` stayed parked for good (renamed, the resume refused: "must finish effects
['pay\\u200b'], which this loop does not declare"). The rule now holds where a new run is made.
The earlier release is played by switching the check off while the run is created.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import loopwright as lw
from loopwright import _keys, _run_create

Z = "\u200b"  # a zero-width space
TASK = {"artifacts": {"doc": {"a": 0, "b": 0}}}


def _loop(paid: list[str]) -> lw.Loop:
    @lw.effect("spend", name=f"pay{Z}", idempotent=True)
    def pay(invoice: str) -> dict[str, Any]:
        paid.append(invoice)
        return {"ok": invoice}

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal(edits=(lw.Edit("doc", "b", 1),), effects=[pay.call(invoice="A-1")])

    return lw.Loop(
        name="names",
        actor=actor,
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0), name=f"c{Z}")],
        effects=[pay],
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=3),
            success=lw.Success(required=(f"c{Z}",)),
            risk=(lw.RiskRule(name=f"r{Z}", touches=("doc/b",)),),
        ),
    )


def test_a_stored_run_under_a_name_refused_since_goes_on(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    paid: list[str] = []
    loop = _loop(paid)  # before: ConfigError here, at the effect's declaration
    with lw.Runtime(url) as rt:
        with monkeypatch.context() as earlier:  # the earlier release: no such check
            earlier.setattr(_run_create, "check_declared_names", lambda loop: None)
            parked = rt.run_sync(loop, TASK, task_key="t")
        assert parked.status == "awaiting_approval" and paid == []
        # a new run of it is refused, saying why
        with pytest.raises(lw.ConfigError) as info:
            rt.create(loop, TASK, task_key="another")
        assert "U+200B" in str(info.value)
        # the stored one goes on: approved, resumed, paid once, accepted
        rt.approve(parked.run_id, by="me")
        done = rt.resume_sync(parked.run_id, loop)
        assert done.status == "accepted" and paid == ["A-1"]
        # continued by its key (an existing run: not a new one)
        assert rt.run_sync(loop, TASK, task_key="t").run_id == parked.run_id
        # and forked, the fork run with the same loop
        fork = rt.fork(parked.run_id, 0, loop=loop, task_key="t-fork")
        assert fork.forked_from == parked.run_id
        assert rt.resume_sync(fork.run_id, loop).status == "awaiting_approval"
        stored = rt.store.get_run(parked.run_id).contract
        assert stored["risk"][0]["name"] == f"r{Z}"


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        ("verifier", "verifiers.name: verifier name"),
        ("effect", "effects.name: effect name"),
        ("risk", "contract.risk.name: risk rule name"),
    ],
)
@pytest.mark.parametrize("char", ["\u202e", Z, " "], ids=["bidi", "invisible", "padded"])
def test_a_fork_given_a_loop_with_a_new_refused_name_is_refused(
    url: str, bad: str, where: str, char: str
) -> None:
    """A fork is a new run: its loop's names are checked as ``Runtime.create`` checks them
    (stop 50: the fork took a new loop declaring ``pay\\u202e``, and a person approved a
    request whose name read reversed). Nothing is made; the clean loop still forks."""
    paid: list[str] = []

    def loop_named(mark: str, part: str) -> lw.Loop:
        @lw.effect("spend", name="pay" + (mark if part == "effect" else ""), idempotent=True)
        def pay(invoice: str) -> dict[str, Any]:
            paid.append(invoice)
            return {"ok": invoice}

        v = "c" + (mark if part == "verifier" else "")
        return lw.Loop(
            name="names",
            actor=lambda ctx: lw.Proposal(edits=(lw.Edit("doc", "b", 1),)),
            verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0), name=v)],
            effects=[pay],
            contract=lw.Contract(
                budget=lw.Budget(max_cycles=3),
                risk=(lw.RiskRule(name="r" + (mark if part == "risk" else ""), touches=("x",)),),
            ),
        )

    with lw.Runtime(url) as rt:
        done = rt.run_sync(loop_named("", bad), TASK, task_key="t")
        assert done.status == "accepted"
        before = rt.store.count_runs()
        with pytest.raises(lw.ConfigError) as info:
            rt.fork(done.run_id, 1, loop=loop_named(char, bad), task_key="t-fork")
        assert str(info.value).startswith(where), str(info.value)
        said = str(info.value)
        assert f"U+{ord(char):04X}" in said or "bidirectional" in said or "whitespace" in said
        assert rt.store.count_runs() == before  # no fork made
        fork = rt.fork(done.run_id, 1, loop=loop_named("", bad), task_key="t-fork")
        assert fork.forked_from == done.run_id


def test_a_stored_run_under_padded_names_goes_on(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Names with leading or trailing whitespace are refused for a new run since stop 50 (a
    verifier ``"c "`` and ``"c"`` printed alike), the loop's and the project's too: a run an
    earlier release stored under them is continued by its key, resumed and forked with the loop
    declaring them, and a new run of that loop is refused, naming the field."""
    paid: list[str] = []
    base = _loop(paid)
    check = lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0), name="c ")
    loop = lw.Loop(
        name="names ",
        actor=base.actor,
        verifiers=[check],
        effects=base.effects,
        project=" p",
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=3),
            success=lw.Success(required=("c ",)),
            risk=(lw.RiskRule(name="r ", touches=("doc/b",)),),
        ),
    )
    with lw.Runtime(url) as rt:
        with monkeypatch.context() as earlier:  # the earlier release: no such check
            earlier.setattr(_run_create, "check_declared_names", lambda loop: None)
            parked = rt.run_sync(loop, TASK, task_key="t")
        assert parked.status == "awaiting_approval"
        assert rt.store.get_run(parked.run_id).project == " p"
        with pytest.raises(lw.ConfigError) as info:
            rt.create(loop, TASK, task_key="another")
        assert str(info.value) == "name: loop name 'names ' must not begin or end with whitespace"
        rt.approve(parked.run_id, by="me")
        assert rt.resume_sync(parked.run_id, loop).status == "accepted" and paid == ["A-1"]
        assert rt.run_sync(loop, TASK, task_key="t").run_id == parked.run_id
        fork = rt.fork(parked.run_id, 0, loop=loop, task_key="t-fork")
        assert rt.resume_sync(fork.run_id, loop).status == "awaiting_approval"
        assert rt.store.get_run(fork.run_id).project == " p"


def _clean(name: str = "names", verifier: str = "c", spec_ref: str | None = None) -> lw.Loop:
    """A loop of clean names, whose first cycle asks a person to approve its edit of doc/b."""
    return lw.Loop(
        name=name,
        actor=lambda ctx: lw.Proposal(edits=(lw.Edit("doc", "b", 1),)),
        verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0), name=verifier)],
        contract=lw.Contract(
            budget=lw.Budget(max_cycles=3), risk=(lw.RiskRule(name="r", touches=("doc/b",)),)
        ),
        spec_ref=spec_ref,
    )


def test_a_new_name_found_inside_the_origins_words_is_not_held_by_it(url: str) -> None:
    """A fork's loop's refused name was let be when it was found anywhere inside the origin's
    texts (stall51): ``"apply "`` (padded) is part of the request's words "apply the cycle-1
    proposal", so a verifier of that name, which the origin never held, was taken as the
    origin's own and the fork made. A name is held whole now."""
    with lw.Runtime(url) as rt:
        parked = rt.run_sync(_clean(), TASK, task_key="t")
        assert parked.status == "awaiting_approval"
        [request] = rt.store.approvals(run_id=parked.run_id)
        assert "apply the cycle-1 proposal" in json.dumps(request.evidence)
        before = rt.store.count_runs()
        with pytest.raises(lw.ConfigError) as info:
            rt.fork(parked.run_id, 0, loop=_clean(verifier="apply "), task_key="f")
        assert str(info.value).startswith("verifiers.name: verifier name 'apply '")
        with pytest.raises(lw.ConfigError, match="only whitespace"):  # (a part of any words)
            rt.fork(parked.run_id, 0, loop=_clean(verifier=" "), task_key="f")
        assert rt.store.count_runs() == before


def test_a_fork_renaming_its_loop_is_refused_a_padded_name(url: str) -> None:
    """A fork's loop renamed (the same spec file: ``other_loop`` lets it be) gave the new run a
    loop name with a trailing space, which ``Runtime.create`` refuses a new run (stall51)."""
    with lw.Runtime(url) as rt:
        parked = rt.run_sync(_clean(spec_ref="loop.toml"), TASK, task_key="t")
        before = rt.store.count_runs()
        renamed = _clean(name="names ", spec_ref="loop.toml")
        with pytest.raises(lw.ConfigError) as info:
            rt.fork(parked.run_id, 0, loop=renamed, task_key="f")
        assert str(info.value) == "name: loop name 'names ' must not begin or end with whitespace"
        assert rt.store.count_runs() == before
        fork = rt.fork(parked.run_id, 0, loop=_clean(name="renamed", spec_ref="loop.toml"))
        assert rt.store.get_run(fork.run_id).loop_name == "renamed"


def test_a_stored_run_under_a_name_longer_than_a_key_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loop and project names are held to 256 characters since stop 51 (PostgreSQL's index
    refused a 10,000-character one); SQLite stored longer ones before. Held where a ``Loop`` is
    built, the loop a stored run needs could not be built any more (review51b): the run could
    not be resumed, continued or forked. Held where a new run is made, it goes on; a new run
    of that loop is refused, naming the length. (SQLite only: PostgreSQL never stored one.)"""
    long_name, long_project = "n" * 300, "p" * 400

    def loop() -> lw.Loop:
        return lw.Loop(
            name=long_name,
            project=long_project,
            actor=lambda ctx: lw.Proposal(edits=(lw.Edit("doc", "b", 1),)),
            verifiers=[lw.Check(fn=lambda s, p: lw.Verdict(passed=True, score=1.0), name="c")],
            contract=lw.Contract(
                budget=lw.Budget(max_cycles=3), risk=(lw.RiskRule(name="r", touches=("doc/b",)),)
            ),
        )

    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        with monkeypatch.context() as earlier:  # the earlier release: no length limit
            earlier.setattr(_keys, "MAX_KEY_CHARS", 100_000)
            parked = rt.run_sync(loop(), TASK, task_key="t")
        assert parked.status == "awaiting_approval"
        assert rt.store.get_run(parked.run_id).loop_name == long_name
        # the loop built anew, as a later process builds it from its spec
        again = loop()  # (before: refused here, every later step with it)
        with pytest.raises(lw.ConfigError) as info:
            rt.create(again, TASK, task_key="another")
        assert str(info.value).startswith("name: loop name 'nnnn")
        assert str(info.value).endswith("must be at most 256 characters (got 300)")
        rt.approve(parked.run_id, by="me")
        assert rt.resume_sync(parked.run_id, loop()).status == "accepted"
        assert rt.run_sync(loop(), TASK, task_key="t").run_id == parked.run_id
        fork = rt.fork(parked.run_id, 0, loop=loop(), task_key="t-fork")
        assert rt.store.get_run(fork.run_id).project == long_project
        assert rt.resume_sync(fork.run_id, loop()).status == "awaiting_approval"
