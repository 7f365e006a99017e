"""The names a loop declares for its verifiers, effects and risk rules refuse bidirectional
controls and invisible characters (tidy49), as loop and project names and task keys refuse
them (``_keys``): a name holding U+202E prints as another, and "pay" and "pay\\u200b" are two
effects that print alike. Before, they were taken and only shown escaped. The error names the
character and its position; a spec (``loopwright check``) says the same. They are refused where
a new run is made of the loop (``Runtime.create``), not where the loop is built (review49c): a
run an earlier release started under such a name is resumed, continued and forked with a loop
declaring it, and a contract it stored still loads (and so is read, listed and replayed)."""

from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path

import pytest

import loopwright as lw
from loopwright.cli import main

BAD = [
    ("a\u202eb", "bidirectional control (U+202E at position 2)"),
    ("\u2066pay", "bidirectional control (U+2066 at position 1)"),
    ("x\u200f", "bidirectional control (U+200F at position 2)"),
    ("r\u061c1", "bidirectional control (U+061C at position 2)"),
    ("pa\u200by", "invisible character (U+200B at position 3)"),
    ("pay\ufeff", "invisible character (U+FEFF at position 4)"),
    ("soft\u00adhyphen", "invisible character (U+00AD at position 5)"),
    ("two\nlines", "control character (U+000A at position 4)"),
    # stop 50: "check" and "check " were two checks that print alike
    ("check ", "'check ' must not begin or end with whitespace"),
    (" pay", "' pay' must not begin or end with whitespace"),
    ("r\u00a0", "'r\\xa0' must not begin or end with whitespace"),
]


def _check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    return lw.Verdict(passed=True, score=1.0)


def _actor(ctx: lw.Context) -> lw.Proposal:
    return lw.Proposal()


def _loop(*, check: str = "check", rule: str | None = None) -> lw.Loop:
    risk = () if rule is None else (lw.RiskRule(name=rule, touches=("doc/a",)),)
    return lw.Loop(
        name="names",
        actor=_actor,
        verifiers=[lw.Check(fn=_check, name=check)],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1), risk=risk),
    )


def _refused(loop: lw.Loop) -> lw.ConfigError:
    """The error ``Runtime.create`` refuses a new run of ``loop`` with (nothing stored)."""
    with lw.Runtime(":memory:") as rt:
        with pytest.raises(lw.ConfigError) as info:
            rt.create(loop, {"artifacts": {"doc": {"a": "x"}}}, task_key="t")
        assert rt.store.list_runs() == []
    return info.value


@pytest.mark.parametrize(("name", "said"), BAD)
def test_a_verifier_name_is_refused(name: str, said: str) -> None:
    with pytest.raises(lw.ConfigError) as info:
        raise _refused(_loop(check=name))
    assert info.value.field == "verifiers.name"
    assert said in str(info.value) and "verifier name" in str(info.value)
    assert repr(name) in str(info.value)  # (shown escaped, with repr)


@pytest.mark.parametrize(("name", "said"), BAD)
def test_an_effect_name_is_refused(name: str, said: str) -> None:
    pay = lw.effect("spend", name=name)(lambda **_: None)
    loop = _loop()
    with pytest.raises(lw.ConfigError) as info:
        raise _refused(
            lw.Loop(
                name="names",
                actor=_actor,
                verifiers=loop.verifiers,
                contract=loop.contract,
                effects=[pay],
            )
        )
    assert info.value.field == "effects.name"
    assert said in str(info.value) and "effect name" in str(info.value)


@pytest.mark.parametrize(("name", "said"), BAD)
def test_a_risk_rule_name_is_refused_where_a_loop_declares_it(name: str, said: str) -> None:
    rule = lw.RiskRule(name=name, touches=("doc/a",))  # a stored contract's rule loads
    stored = lw.Contract(budget=lw.Budget(max_cycles=1), risk=(rule,)).to_dict()
    again = lw.Contract.from_dict(stored)
    assert again.risk[0].name == name
    with pytest.raises(lw.ConfigError) as info:
        raise _refused(_loop(rule=name))
    assert info.value.field == "contract.risk.name"
    assert said in str(info.value) and "risk rule name" in str(info.value)


@pytest.mark.parametrize(
    ("name", "said"), [*BAD, (" ", "must not be empty or only whitespace"), ("\t", "")]
)
def test_an_approval_rule_name_is_refused_where_a_loop_declares_it(name: str, said: str) -> None:
    """``PolicyRule.name`` names the request a person decides, as a risk rule's does; it was
    not checked at all (stop 50). Built as it is: a run parked on it goes on."""
    rule = lw.PolicyRule(kind="spend", action="require", name=name)
    loop = _loop()
    with pytest.raises(lw.ConfigError) as info:
        raise _refused(
            lw.Loop(
                name="names",
                actor=_actor,
                verifiers=loop.verifiers,
                contract=loop.contract,
                approvals=lw.ApprovalPolicy(rules=(rule,)),
            )
        )
    assert info.value.field == "approvals.name"
    assert said in str(info.value) and "approval rule name" in str(info.value)


def test_approval_rules_left_unnamed_alike_are_told_to_be_named() -> None:
    rules = [lw.PolicyRule(kind="spend", action="require", above=n) for n in (10, 100)]
    with pytest.raises(lw.ConfigError) as info:
        lw.ApprovalPolicy(rules=rules)
    assert "['spend-require']" in str(info.value) and "give each its own name" in str(info.value)


@pytest.mark.parametrize("name", [" ", "  "])
def test_a_blank_verifier_name_is_refused(name: str) -> None:
    assert "must not be empty or only whitespace" in str(_refused(_loop(check=name)))


def test_visible_names_of_any_script_are_taken() -> None:
    for name in ("check", "prüfung", "проверка", "検査", "a b", "a.b-c_d", "✅"):
        loop = _loop(check=name, rule=name)
        assert loop.verifiers[0].name == name and loop.contract.risk[0].name == name
        assert lw.effect("spend", name=name)(lambda **_: None).name == name


def _padded(field: str, name: str) -> str:
    return f"{field}: project name {name!r} must not begin or end with whitespace"


@pytest.mark.parametrize("name", ["p ", " p", "p\t"])
def test_a_new_runs_padded_project_name_is_refused_wherever_it_is_given(name: str) -> None:
    """A project named with leading or trailing whitespace (stop 50: "p" and "p " were two
    projects that print alike in ``runs``, the dashboard and the audit): refused for a new run,
    whether the ``Loop``, ``create`` or the task gives it; nothing is stored."""
    task = {"artifacts": {"doc": {"a": "x"}}}
    loop = _loop()
    if name != "p\t":  # (a tab is a control character: refused where the Loop is built)
        by_loop = dataclasses.replace(loop, project=name)
        assert str(_refused(by_loop)) == _padded("project", name)
    with lw.Runtime(":memory:") as rt:
        for given, field in (({"project": name}, "project"), ({}, "task.project")):
            with pytest.raises(lw.ConfigError) as info:
                rt.create(loop, dict(task, **({} if given else {"project": name})), **given)
            if name != "p\t":
                assert str(info.value) == _padded(field, name)
            assert "Traceback" not in str(info.value)
        assert rt.store.list_runs() == []
        assert rt.create(loop, task, task_key="t", project="p q")[0].project == "p q"


@pytest.mark.parametrize("name", ["names ", " names"])
def test_a_new_runs_padded_loop_name_is_refused(name: str) -> None:
    err = _refused(dataclasses.replace(_loop(), name=name))  # built (a stored run's loop)
    assert str(err) == f"name: loop name {name!r} must not begin or end with whitespace"


SPEC = """
name = "demo"

[actor]
ref = "code.py:propose"

[[verifiers]]
name = "{check}"
ref = "code.py:check"

[contract.budget]
max_cycles = 3

[[contract.risk]]
name = "{rule}"
touches = ["doc/a"]
"""

CODE = """
import loopwright as lw

def propose(ctx):
    return lw.Proposal()

def check(state, proposal):
    return lw.Verdict(passed=True)
"""


@pytest.mark.parametrize(
    ("check", "rule", "said"),
    [
        (
            "a\\u202Eb",
            "r",
            "verifier name 'a\\u202eb' must not hold a bidirectional control "
            "(U+202E at position 2)",
        ),
        (
            "check ",
            "r",
            "verifier name 'check ' must not begin or end with whitespace",
        ),
        (
            "check",
            "r\\u200B",
            "risk rule name 'r\\u200b' must not hold an invisible character (U+200B at position 2)",
        ),
    ],
)
def test_loopwright_check_refuses_them_in_a_spec(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], check: str, rule: str, said: str
) -> None:
    (tmp_path / "code.py").write_text(CODE)
    spec = tmp_path / "loop.toml"
    spec.write_text(textwrap.dedent(SPEC.format(check=check, rule=rule)))
    assert main(["check", str(spec)]) != 0
    err = capsys.readouterr().err
    assert said in " ".join(err.split()), err
    assert "Traceback" not in err


def test_a_stored_runs_risk_rule_name_is_still_shown_and_replayed(tmp_path: Path) -> None:
    """A run an earlier release stored under a rule named with a bidirectional control (its
    contract rewritten in the store as that release would have written it): ``show`` and
    ``runs`` read it, and replay replays it under its own contract."""
    import json
    import sqlite3

    from support.printed import shown_text

    from loopwright.replay import simulate, trace_of_run
    from loopwright.store import open_store

    path = tmp_path / "s.db"
    with lw.Runtime(str(path)) as rt:
        r = rt.run_sync(_loop(rule="r"), {"artifacts": {"doc": {"a": "x"}}}, task_key="t")
    with sqlite3.connect(path) as db:
        [(text,)] = db.execute("SELECT contract FROM runs WHERE run_id = ?", (r.run_id,))
        contract = json.loads(text)
        contract["risk"][0]["name"] = "r\u202e"
        db.execute(
            "UPDATE runs SET contract = ? WHERE run_id = ?", (json.dumps(contract), r.run_id)
        )
    assert r.run_id in shown_text(str(path), r.run_id)[0]
    assert main(["runs", "--store", str(path)]) == 0
    with open_store(str(path)) as st:
        rec = st.get_run(r.run_id)
        trace = trace_of_run(st, rec)
    assert trace is not None
    stored = lw.Contract.from_dict(rec.contract)
    assert stored.risk[0].name == "r\u202e"
    assert simulate(trace, stored).cycles == r.cycles


def test_loopwright_check_refuses_a_tasks_padded_project(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A task's ``project`` that `loopwright run` would refuse (stop 50) is said by `check`,
    naming the file and line, before any run is made."""
    (tmp_path / "code.py").write_text(CODE)
    spec = tmp_path / "loop.toml"
    spec.write_text(textwrap.dedent(SPEC.format(check="check", rule="r")))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"artifacts": {"doc": {"a": 1}}, "project": "p "}\n')
    assert main(["check", str(spec), "--tasks", str(tasks)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "tasks.jsonl:1: project name 'p ' must not begin or end with whitespace" in err, err
