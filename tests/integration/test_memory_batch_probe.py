"""Several runs' memory searches in one store call (GroupRecall) ask the database once which
of all their scopes hold active memory: each search gets exactly what it gets alone."""

from __future__ import annotations

from loopwright._memory import memory_search
from loopwright.store import open_store


def _item(memory_id: str, scope: str, key: str, status: str = "active") -> dict[str, object]:
    return {
        "memory_id": memory_id,
        "scope": scope,
        "scope_key": key,
        "signal": "do",
        "strength": 0.8,
        "text": f"keep the title short ({memory_id})",
        "rule": None,
        "source": {},
        "by": "ana",
        "status": status,
        "created_at": 1.0,
        "updated_at": 1.0,
        "history": [],
    }


def test_a_batch_of_searches_answers_as_each_alone(url: str) -> None:
    store = open_store(url)
    try:
        store.memory_add(_item("t1", "task", "k1"))
        store.memory_add(_item("p1", "project", "shop"))
        store.memory_add(_item("t3", "task", "k3", status="candidate"))  # not active
        searches = [
            memory_search([("task", f"k{i}"), ("project", project)], "title")
            for i, project in enumerate(["", "shop", "", "", "other"] * 3)
        ]
        batch = store.memory_search(searches)
        alone = [store.memory_search([s])[0] for s in searches]
        assert batch == alone
        found = [sorted(r["memory_id"] for r in rows) for rows in batch]
        assert found[:5] == [[], ["p1", "t1"], [], [], []]
        # more pairs than one statement binds: the probe goes in chunks
        many = [memory_search([("task", f"n{i}")], "title") for i in range(450)]
        many.append(memory_search([("task", "k1")], "title"))
        rows = store.memory_search(many)
        assert [r["memory_id"] for r in rows[-1]] == ["t1"]
        assert not any(rows[:-1])
    finally:
        store.close()
