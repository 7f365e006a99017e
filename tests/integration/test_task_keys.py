"""A task key (or a run id looked up) that breaks the rule of keys (loopwright/_keys.py,
docs/concepts.md) is refused with a ConfigError naming the field and the rule, alike on SQLite
and PostgreSQL; before, PostgreSQL answered a NUL with a StoreError, a long key with a
StoreUnavailableError ("the store failed for now"), and both stores took blank, padded and
multi-line keys, or raised UnicodeEncodeError for a lone surrogate."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.dashboard import dashboard

import loopwright as lw
from loopwright.store import open_store


def actor(ctx: lw.Context) -> lw.Proposal:
    return lw.Proposal.edit("doc", {"a": ctx.artifacts["doc"]["a"] + 1})


def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    a = state.artifacts["doc"].values()["a"]
    return lw.Verdict(passed=a >= 2, score=min(1.0, a / 2))


def make_loop(name: str = "keys", spec_ref: str | None = None) -> lw.Loop:
    contract = lw.Contract(budget=lw.Budget(max_cycles=5))
    return lw.Loop(name=name, actor=actor, verifiers=[check], contract=contract, spec_ref=spec_ref)


TASK = {"artifacts": {"doc": {"a": 0}}}
MAX_KEY_CHARS = 256  # the rule's longest key (docs/concepts.md; loopwright._keys.MAX_KEY_CHARS)

# (key, words the error must hold): what each rule refuses
BAD = [
    ("", "must not be empty"),
    ("   ", "must not be empty"),
    ("\u200b", "must hold a visible character"),
    (" t1", "must not begin or end with whitespace"),
    ("t1\n", "must not begin or end with whitespace"),
    ("x" * (MAX_KEY_CHARS + 1), f"at most {MAX_KEY_CHARS} characters"),
    ("\u9fa0" * 5000, f"at most {MAX_KEY_CHARS} characters"),  # PostgreSQL's index limit
    ("a\x00b", "control character (U+0000"),
    ("a\nb", "control character (U+000A"),
    ("a\x1b[31mb", "control character (U+001B"),
    ("a\x85b", "control character (U+0085"),
    ("a\u2028b", "control character (U+2028"),
    ("a\u202eb", "bidirectional control (U+202E"),
    ("a\ud800b", "lone surrogate (U+D800"),
]
GOOD = [
    "t1",
    "e2e:#1",
    "invoices/INV-7 (vendor V)",
    "ünïcødé 請求書",
    "👨\u200d👩\u200d👧",  # joiners inside a key are fine
    "\U0001f600" * MAX_KEY_CHARS,  # 4 bytes a character: still under PostgreSQL's limit
]


def count_runs(url: str) -> int:
    with open_store(url) as st:
        return len(st.list_runs())


@pytest.mark.parametrize(("key", "words"), BAD, ids=range(len(BAD)))
def test_a_bad_task_key_is_refused_alike_on_both_stores(url: str, key: str, words: str) -> None:
    with lw.Runtime(store=open_store(url)) as rt:
        with pytest.raises(lw.ConfigError) as given:
            rt.run_sync(make_loop(), TASK, task_key=key)
        assert given.value.field == "task_key"
        assert words in str(given.value)
        with pytest.raises(lw.ConfigError) as in_task:
            rt.run_sync(make_loop(), {**TASK, "task_key": key})
        assert in_task.value.field == "task.task_key"
        assert words in str(in_task.value)
    assert count_runs(url) == 0


def test_good_keys_run_alike_on_both_stores(url: str) -> None:
    with lw.Runtime(store=open_store(url)) as rt:
        for key in GOOD:
            res = rt.run_sync(make_loop(), TASK, task_key=key)
            assert (res.task_key, res.status) == (key, "accepted")
            assert rt.store.get_run(key).run_id == res.run_id  # found by its key
        again = rt.run_sync(make_loop(), TASK, task_key=GOOD[0])  # the same run, as before
        assert again.run_id == rt.store.get_run(GOOD[0]).run_id
        assert len(rt.store.list_runs()) == len(GOOD)


@pytest.mark.parametrize(
    ("ident", "words"),
    [
        ("a\x00b", "control character (U+0000"),
        ("a\ud800b", "lone surrogate"),
    ],
    ids=["nul", "surrogate"],
)
def test_a_lookup_that_breaks_the_rule_is_refused_alike(url: str, ident: str, words: str) -> None:
    with open_store(url) as st, pytest.raises(lw.ConfigError) as exc:
        st.get_run(ident)
    assert exc.value.field == "run"
    assert words in str(exc.value)


@pytest.mark.parametrize("ident", ["\u9fa0" * 5000, "a\nb", " padded", "t\x1b"])
def test_a_lookup_the_rule_of_new_keys_refuses_is_still_looked_up(url: str, ident: str) -> None:
    # refusing it said "no run has this id or key", untrue of a run an older release stored
    with open_store(url) as st, pytest.raises(lw.RunNotFoundError):
        st.get_run(ident)


def test_a_run_stored_with_a_key_the_rule_now_refuses_is_found_by_it(tmp_path: Path) -> None:
    old_key = "an older release's key " + "x" * 300  # over the length new keys may have
    with lw.Runtime(store=open_store(f"sqlite:///{tmp_path / 's.db'}")) as rt:
        run = rt.run_sync(make_loop(), TASK, task_key="k")
        with rt.store._conn() as conn:  # type: ignore[attr-defined]
            conn.execute("UPDATE runs SET task_key=? WHERE run_id=?", (old_key, run.run_id))
        assert rt.store.get_run(old_key).run_id == run.run_id


def test_a_fork_key_is_checked_and_a_derived_one_fits(url: str) -> None:
    longest = "k" * MAX_KEY_CHARS
    with lw.Runtime(store=open_store(url)) as rt:
        origin = rt.run_sync(make_loop(), TASK, task_key=longest)
        with pytest.raises(lw.ConfigError, match="must not hold a control character"):
            rt.fork(origin.run_id, 0, task_key="fork\x00")
        new = rt.fork(origin.run_id, 0)  # "<key>~fork-…" is cut to fit, its suffix kept
        assert len(new.task_key) == MAX_KEY_CHARS
        assert new.task_key.startswith("k") and "~fork-" in new.task_key
        assert rt.store.get_run(new.task_key).run_id == new.run_id


def test_the_http_api_answers_400_for_a_bad_run_id_or_key(url: str, tmp_path: Path) -> None:
    with lw.Runtime(store=open_store(url)) as rt:
        origin = rt.run_sync(make_loop(), TASK, task_key="t1")
    client = dashboard(url, token="test-token-0123456789")
    r = client.get("/api/runs/a%00b")  # a NUL: no store can look it up alike
    assert r.status_code == 400, r.text
    assert "NUL" in r.json()["detail"]
    r = client.get("/api/runs/a%1Bb")  # an escape: looked up (an older run may have it)
    assert r.status_code == 404 and "no run" in r.json()["detail"], r.text
    r = client.post(
        f"/api/runs/{origin.run_id}/rerun",
        json={"at_cycle": 0, "task_key": " padded", "start": False},
        headers={"Authorization": "Bearer test-token-0123456789"},
    )
    assert r.status_code == 400, r.text
    assert "must not begin or end with whitespace" in r.json()["detail"]
    assert count_runs(url) == 1
