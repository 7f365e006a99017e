"""A run's row (``RunRecord``) built in a test, every field a plain default but those given."""

from __future__ import annotations

from typing import Any

from loopwright.store import RunRecord


def run_row(**kw: Any) -> RunRecord:
    base: dict[str, Any] = {
        "run_id": "r1",
        "task_key": "k1",
        "loop_name": "L",
        "project": "p",
        "status": "accepted",
        "stop_reason": "success",
        "cycle": 1,
        "best_score": 1.0,
        "cost_usd": 1.0,
        "tokens": 0,
        "seconds": 0.0,
        "spec_ref": None,
        "loop_version": "v1",
        "contract": {},
        "task": {},
        "packet": None,
        "created_at": 1000.0,
        "updated_at": 1000.0,
        "ended_at": 1060.0,
        "cancel_requested": False,
        "lease_owner": None,
        "lease_expires_at": None,
        "fencing_token": 1,
        "last_seq": 0,
        "held_out_passed": None,
    }
    return RunRecord(**(base | kw))
