"""``loopwright diff RUN FORK`` showed "-" for each cycle the fork inherited (leftovers48): a
fork records only its own cycles, so its curve began at its fork point. The inherited cycles
show the origin's scores, marked, and a line says whose they are."""

from __future__ import annotations

import json
from pathlib import Path

from .test_bad_inputs import lw

TASK = {"artifacts": {"doc": {"a": 0, "b": 0, "c": 0, "pay": 10}}}  # 4 cycles, one fix each


def _fork(project: Path, store: Path, run: str, at: int, key: str) -> None:
    r = lw("fork", run, "--at-cycle", str(at), "--key", key, "--by", "ann", cwd=project,
           store=store)  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = lw("resume", key, cwd=project, store=store)
    assert r.returncode == 0, r.stderr


def test_a_forks_inherited_cycles_show_its_origins_scores(project: Path) -> None:
    store = project / "s.db"
    (project / "t.json").write_text(json.dumps(TASK))
    r = lw("run", "loop.toml", "--task", "t.json", "--task-key", "o", cwd=project, store=store)
    assert r.returncode == 0, r.stderr
    _fork(project, store, "o", 2, "f1")
    _fork(project, store, "f1", 3, "f2")  # a fork of a fork: cycles 1-2 are o's, 3 is f1's
    doc = json.loads(lw("diff", "o", "f2", "--json", cwd=project, store=store).stdout)
    curve = {c["cycle"]: c for c in doc["scores"]}
    assert [curve[n]["b"] for n in (1, 2, 3, 4)] == [0.25, 0.5, 0.75, 1.0]
    assert [curve[n]["a"] for n in (1, 2, 3, 4)] == [0.25, 0.5, 0.75, 1.0]
    assert [curve[n]["b_inherited"] for n in (1, 2, 3, 4)] == [True, True, True, False]
    assert not any(c["a_inherited"] for c in doc["scores"])
    assert (doc["a"]["inherited_cycles"], doc["b"]["inherited_cycles"]) == (0, 3)
    out = lw("diff", "o", "f2", cwd=project, store=store, env={"COLUMNS": "120"}).stdout
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line[:6].strip()
            .isdigit()}  # fmt: skip
    assert rows["1"] == ["0.250", "0.250*"] and rows["4"] == ["1.000", "1.000"]
    f1 = doc["b"]["forked_from"][:12]
    assert f"* B's cycles 1-3: inherited from its origin {f1}" in out
