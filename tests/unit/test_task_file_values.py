"""A new user's task files and tasks (newuser46): what a file holds is what the run reads, or a
one-line refusal naming the line.

* A JSON string may hold U+2028, U+2029 or U+0085 as they are (``json.dumps(...,
  ensure_ascii=False)`` writes them so: text from PDFs and web pages has them); the task file
  was split at them as at a newline (``str.splitlines``) and the line refused as
  "Unterminated string".
* ``1e999`` was read as infinity and stored as ``null`` (NaN was refused); a key given twice
  kept the last silently. Refused now, as every other value a person types is
  (``_json.strict_loads``).
* A task given to ``Runtime.create`` holding NaN or an infinity was stored, and read by the run
  and every resume of it, as ``None``: refused, naming where.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest

import loopwright as lw
from loopwright.cli._tasks import load_tasks


def _write(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize("odd", ["\u2028", "\u2029", "\x85"])
def test_a_line_separator_inside_a_string_is_text_not_a_line_end(tmp_path: Path, odd: str) -> None:
    goal = f"first{odd}second"
    first = json.dumps({"task_key": "a", "goal": goal}, ensure_ascii=False)
    assert odd in first  # written as it is, not escaped
    path = _write(tmp_path / "t.jsonl", first, json.dumps({"task_key": "b"}))
    tasks = load_tasks(None, path, None)
    assert [t["task_key"] for t in tasks] == ["a", "b"]
    assert tasks[0]["goal"] == goal
    assert tasks.lines == [1, 2]


def test_line_ends_a_file_may_use_are_line_ends(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b'{"task_key": "a"}\r\n{"task_key": "b"}\r{"task_key": "c"}\n\n')
    tasks = load_tasks(None, path, None)
    assert [t["task_key"] for t in tasks] == ["a", "b", "c"]
    assert tasks.lines == [1, 2, 3]


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ('{"task_key": "a", "x": 1e999}', "the number 1e999 is out of range"),
        ('{"task_key": "a", "x": -1e400}', "out of range"),
        ('{"task_key": "a", "x": NaN}', "NaN is not a JSON value"),
        ('{"task_key": "a", "task_key": "b"}', "the key 'task_key' is given twice"),
    ],
)
def test_a_value_the_store_would_change_is_refused_naming_the_line(
    tmp_path: Path, line: str, words: str
) -> None:
    path = _write(tmp_path / "t.jsonl", json.dumps({"task_key": "ok"}), line)
    with pytest.raises(lw.ConfigError, match=r"t\.jsonl:2: not valid JSON") as err:
        load_tasks(None, path, None)
    assert words in str(err.value)
    one = tmp_path / "one.json"
    one.write_text(line)
    with pytest.raises(lw.ConfigError, match="is not valid JSON") as err:
        load_tasks(one, None, None)
    assert words in str(err.value) and err.value.field == "--task"


def _loop() -> lw.Loop:
    return lw.Loop(
        name="nums",
        actor=lambda ctx: lw.Proposal.edit("a", {"x": 1}),
        verifiers=[lw.Check(fn=lambda state, proposal: lw.Verdict(passed=True))],
        contract=lw.Contract(budget=lw.Budget(max_cycles=2)),
    )


@pytest.mark.parametrize(
    ("task", "where"),
    [
        ({"artifacts": {"inv": {"qty": math.nan}}}, "artifacts.inv.qty is nan"),
        ({"artifacts": {"inv": {"qty": 1}}, "rates": [0.1, math.inf]}, "rates[1] is inf"),
        ({"meta": {"limit": -math.inf}}, "meta.limit is -inf"),
    ],
)
def test_a_task_holding_nan_or_infinity_is_refused_before_the_run_exists(
    tmp_path: Path, task: dict[str, object], where: str
) -> None:
    with lw.Runtime(tmp_path / "s.db") as rt:
        with pytest.raises(lw.ConfigError, match="give None for a missing number") as err:
            rt.create(_loop(), task, task_key="k")
        assert where in str(err.value) and err.value.field == "task"
        assert rt.store.list_runs() == []
        # a number JSON holds, however large, is kept as given
        rec, made = rt.create(_loop(), {"artifacts": {"inv": {"qty": 10**30}}}, task_key="k")
        assert made and rec.task == {"artifacts": {"inv": {"qty": 10**30}}}


@pytest.mark.parametrize(
    ("task", "field"),
    [
        ({"goal": {"text": "reconcile"}}, "task.goal"),  # (was stored as "{'text': ...}")
        ({"goal": 7}, "task.goal"),
        ({"project": 5}, "task.project"),  # (was "5"; the project argument refuses 5)
        ({"project": {"name": "ap"}}, "task.project"),  # (was "{'name': 'ap'}")
        ({"project": ["ap"]}, "task.project"),
        ({"task_key": {"k": 1}}, "task.task_key"),  # (was the key "{'k': 1}")
        ({"task_key": True}, "task.task_key"),  # (was the key "True")
    ],
)
def test_a_goal_project_or_key_of_the_wrong_kind_is_refused_naming_it(
    tmp_path: Path, task: dict[str, object], field: str
) -> None:
    """What a task gives for goal, project and key is text (a key may be a whole number):
    anything else was stored as its Python text, not refused (a task file's table project
    was refused, its number taken; docs/concepts.md documents a whole number for a key only)."""
    with lw.Runtime(tmp_path / "s.db") as rt:
        with pytest.raises(lw.ConfigError, match="must be text") as err:
            rt.create(_loop(), {"artifacts": {"a": {"x": 0}}, **task})
        assert err.value.field == field, err.value
        with pytest.raises(lw.ConfigError):
            asyncio.run(rt.run(_loop(), {"artifacts": {"a": {"x": 0}}, **task}))
        assert rt.store.list_runs() == []
        # what is accepted: text, a whole-number key (its digits), and null for each
        ok = {"goal": None, "project": "ap", "task_key": 12, "artifacts": {"a": {"x": 0}}}
        rec, made = rt.create(_loop(), ok)
        assert made and (rec.task_key, rec.project) == ("12", "ap")
        assert lw.TaskState.from_task({"goal": None}).goal == ""  # (was "None")


def test_run_many_runs_a_keyed_batch_once_and_a_keyless_one_again(tmp_path: Path) -> None:
    """What docs/concepts.md says of running a batch again (it said "re-runs nothing that
    ended" of every batch; a task without a key, an ``id`` field notwithstanding, gets a new
    ``<loop>:<uuid>`` key and a new run each time)."""
    keyed = [{"task_key": f"k{i}", "artifacts": {"a": {"x": 0}}} for i in range(2)]
    keyless = [{"id": i, "artifacts": {"a": {"x": 0}}} for i in range(2)]
    with lw.Runtime(tmp_path / "s.db") as rt:
        first = asyncio.run(rt.run_many(_loop(), keyed))
        assert [r.run_id for r in asyncio.run(rt.run_many(_loop(), keyed))] == [
            r.run_id for r in first
        ]
        by_key = asyncio.run(rt.run_many(_loop(), keyless, key_of=lambda t, i: f"id-{t['id']}"))
        again = asyncio.run(rt.run_many(_loop(), keyless, key_of=lambda t, i: f"id-{t['id']}"))
        assert [r.run_id for r in again] == [r.run_id for r in by_key]
        new = asyncio.run(rt.run_many(_loop(), keyless))
        newer = asyncio.run(rt.run_many(_loop(), keyless))
        assert not {r.run_id for r in new} & {r.run_id for r in newer}
        assert all(r.task_key.startswith("nums:") for r in new + newer)
        assert len(rt.store.list_runs()) == 2 + 2 + 4


def test_a_number_for_a_project_is_refused_alike_saying_how_to_give_it(tmp_path: Path) -> None:
    """A project given as a number (refused since stop 47) was refused in other words by the
    CLI's task file ("must be a string, got int 5") and by Runtime.create ("must be text, got
    int"), neither saying how to give a name that is a number (doubts48)."""
    from loopwright.cli._tasks import _checked

    with lw.Runtime(tmp_path / "s.db") as rt, pytest.raises(lw.ConfigError) as api:
        rt.create(_loop(), {"artifacts": {"a": {"x": 0}}, "project": 5})
    with pytest.raises(lw.ConfigError) as cli:
        _checked({"artifacts": {"a": {"x": 0}}, "project": 5}, "t.jsonl:1", "--tasks")
    said = 'must be text, got int 5; a name that is a number is written as text: "5"'
    assert api.value.message == said
    assert cli.value.message == f"t.jsonl:1: project {said}"


def test_a_tasks_other_fields_json_cannot_hold_are_read_as_stored(tmp_path: Path) -> None:
    """docs/concepts.md: a task's other fields are stored as JSON, a value JSON cannot hold (a
    date) as its ``str``; the actor reads what is stored, in its first execution as after a
    resume (a pin of the documented behaviour, checked for doubts48)."""
    import datetime
    import decimal

    seen: list[dict[str, object]] = []

    def actor(ctx: lw.Context) -> lw.Proposal:
        seen.append({k: v for k, v in ctx.task.items() if k != "artifacts"})
        return lw.Proposal.edit("a", {"x": ctx.cycle})

    loop = lw.Loop(
        name="fields",
        actor=actor,
        verifiers=[lw.Check(fn=lambda state, proposal: lw.Verdict(passed=False, score=0.1))],
        contract=lw.Contract(budget=lw.Budget(max_cycles=1)),
    )
    task = {"artifacts": {"a": {"x": 0}}, "due": datetime.date(2026, 1, 2),
            "amount": decimal.Decimal("1.10"), "pair": (1, 2), 7: "seven"}  # fmt: skip
    stored = {"due": "2026-01-02", "amount": "1.10", "pair": [1, 2], "7": "seven"}
    with lw.Runtime(tmp_path / "s.db") as rt:
        r = rt.run_sync(loop, task, task_key="t")
        rec = rt.store.get_run(r.run_id)
        f = rt.fork(r.run_id, at_cycle=0)
        rt.resume_sync(f.run_id, loop)
    assert rec.task == {"artifacts": {"a": {"x": 0}}, **stored}
    assert seen == [stored, stored]  # the run's first execution, and its fork's from the store


@pytest.mark.parametrize(
    ("task", "key"),
    [
        ({"id": 7}, "l:7"),
        ({"id": 0}, "l:#3"),  # passed over: runs have been stored under this key
        ({"id": ""}, "l:#3"),
        ({"id": False}, "l:#3"),
        ({"id": 0, "task_id": "x"}, "l:x"),
        ({"task_id": 0}, "l:0"),
        ({"task_key": 0, "id": 5}, "0"),
        ({}, "l:#3"),
    ],
)
def test_a_lines_task_key_follows_the_documented_rule(task: dict[str, object], key: str) -> None:
    """The rule docs/concepts.md (Task keys) states: a key changed here would start new runs,
    paid for again, for tasks already run."""
    from loopwright.cli._tasks import task_key

    assert task_key("l", task, 2) == key
