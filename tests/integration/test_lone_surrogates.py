"""Half an emoji a model wrote (a lone surrogate, JSON's ``"\\ud83d"``) is stored as U+FFFD.

Stored as it was, no page, API answer or ``loopwright show`` that printed the run could encode
it: the run's page and ``/api/runs/{id}`` answered 500 and ``show`` an internal error, on
SQLite and PostgreSQL. Effect arguments holding one are refused (their key is computed again
from the stored arguments after a restart, which must not differ).
"""

from __future__ import annotations

import json

import pytest
from support.dashboard import dashboard

import loopwright as lw
from loopwright._json import dumps, loads
from loopwright.cli import main

HALF = "\ud83d"


def _actor(ctx: lw.Context) -> lw.Proposal:
    return lw.Proposal.edit(
        "doc",
        {"body": f"half an emoji {HALF} here", "meta": {"k": [HALF]}},
        note=f"note {HALF}",
    )


def _check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=False, score=0.5, findings=(lw.Finding(f"bad {HALF}", "doc", "body"),))


LOOP = lw.Loop(
    name="half",
    actor=_actor,
    verifiers=[lw.Check(fn=_check)],
    contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
)


def test_a_run_whose_actor_wrote_a_lone_surrogate_is_shown(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with lw.Runtime(url) as rt:
        res = rt.run_sync(LOOP, {"artifacts": {"doc": {"body": ""}}}, task_key="t")
        assert res.stop_reason == "budget_cycles"
        part = rt.store.latest_checkpoint(res.run_id).task_state().part("doc/body")
        assert part is not None
        assert [v.value for v in part.versions][-1] == "half an emoji \ufffd here"
    assert main(["show", res.run_id, "--store", url, "--json"]) == 0
    shown = capsys.readouterr().out
    assert (
        "half an emoji \ufffd here"
        in json.loads(shown)["state"]["artifacts"][0]["parts"][0]["versions"][-1]["value"]
    )
    client = dashboard(url, token="t" * 24)
    page = client.get(f"/runs/{res.run_id}")
    assert page.status_code == 200 and "half an emoji \ufffd here" in page.text
    assert "bad \ufffd" in page.text
    assert client.get(f"/api/runs/{res.run_id}").status_code == 200


def test_the_json_the_stores_write_holds_text_only() -> None:
    value = {f"a{HALF}": [f"x{HALF}\ude00y", "z\udc00", 1.5, float("nan")], "n": 10**30}
    assert loads(dumps(value)) == {"a\ufffd": ["x\U0001f600y", "z\ufffd", 1.5, None], "n": 10**30}
    assert loads(dumps({"k": "plain 😀"})) == {"k": "plain 😀"}  # the fast path, unchanged


def test_effect_arguments_holding_a_lone_surrogate_are_refused() -> None:
    @lw.effect("spend")
    def pay(vendor: str, *, key: str) -> int:
        return 1

    with pytest.raises(lw.ConfigError, match=r"lone surrogate \(\\ud83d\)"):
        pay.call(vendor=f"ACME {HALF}")
    with pytest.raises(lw.ConfigError, match="lone surrogate"):
        pay.call(vendor="ACME", extra={"k": [HALF]})
    assert pay.call(vendor="ACME 😀").args == {"vendor": "ACME 😀"}


def test_a_part_name_holding_a_lone_surrogate_is_refused_and_the_run_ends(url: str) -> None:
    """A part's name is a column of the store: the commit failed with UnicodeEncodeError out
    of run_sync and left the run running for good."""

    def actor(ctx: lw.Context) -> lw.Proposal:
        return lw.Proposal.edit("doc", {f"k{HALF}": 1})

    loop = lw.Loop(
        name="half-name",
        actor=actor,
        verifiers=[lw.Check(fn=_check)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )
    with lw.Runtime(url) as rt:
        res = rt.run_sync(loop, {"artifacts": {"doc": {"body": ""}}}, task_key="t")
        assert res.status == "escalated"
        assert rt.store.get_run(res.run_id).status == "escalated"
    with pytest.raises(lw.ConfigError, match=r"Edit\.part"):
        lw.Edit("doc", f"k{HALF}", 1)
    with pytest.raises(lw.ConfigError, match=r"Edit\.artifact"):
        lw.Proposal(replace={f"d{HALF}": {"k": 1}})
    assert lw.Edit("döc", "k😀", 1).ref == "döc/k😀"
