"""The run the stored-secret tests share: an actor and a check planting secrets, run into a
SQLite store until it escalates; what it left is handed back to be searched byte by byte."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright.trace import otlp_trace


def planted_run(tmp_path: Path, actor: Any, check: Any) -> tuple[str, str, bytes]:
    """Run ``actor`` against ``check`` for up to 3 cycles into ``tmp_path/s.db``: the run's
    packet (it must escalate), its OTLP trace, and the database files' bytes."""
    loop = lw.Loop(
        name="planted",
        actor=actor,
        verifiers=[check],
        contract=lw.Contract(budget=lw.Budget(max_cycles=3)),
        retry=lw.RetryPolicy(attempts=1),
    )
    with lw.Runtime(str(tmp_path / "s.db")) as rt:
        r = rt.run_sync(loop, {"artifacts": {"doc": {"a": 0}}}, task_key="planted")
        assert r.status == "escalated"
        trace = json.dumps(otlp_trace(rt.store, r.run_id))
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.name.startswith("s.db"))
    return str(r.packet), trace, raw
