"""A task's hidden part is its ``held_out`` key, exactly; one spelled ``held-out`` (TOML's
kebab case), ``heldOut`` or ``Held_Out`` — which memory's screen already takes for a
held-out marker — was shown to the actor and to a reviewer model in full. It is refused,
naming the key, before the run exists (trust53)."""

from __future__ import annotations

from pathlib import Path

import pytest

import loopwright as lw

SECRET_TESTS = ["assert f(2) == 'trust53-hidden'"]


def _loop(seen: list[str]) -> lw.Loop:
    def actor(ctx: lw.Context) -> lw.Proposal:
        seen.append(repr(ctx))
        return lw.Proposal(note="look")

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.0)

    return lw.Loop(
        name="spelling53",
        actor=actor,
        verifiers=[lw.Check(fn=check)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )


@pytest.mark.parametrize("key", ["held-out", "heldOut", "Held_Out", "HELD OUT", "heldout"])
def test_a_misspelt_held_out_key_is_refused_not_shown(tmp_path: Path, key: str) -> None:
    seen: list[str] = []
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        task = {"goal": "g", "artifacts": {"p": {"code": ""}}, key: {"tests": SECRET_TESTS}}
        with pytest.raises(lw.ConfigError, match=r"held_out") as err:
            rt.run_sync(_loop(seen), task)
        assert key in str(err.value)
        assert rt.store.list_runs() == []
    assert not seen


def test_the_reserved_spelling_is_hidden_and_runs(tmp_path: Path) -> None:
    seen: list[str] = []
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        task = {"goal": "g", "artifacts": {"p": {"code": ""}}, "held_out": {"tests": SECRET_TESTS}}
        rt.run_sync(_loop(seen), task)
    assert seen and not [s for s in seen if "trust53-hidden" in s]
