"""A module that imports in the driver but not in a Ray worker: stands for a spec whose files
are missing on the nodes."""

from __future__ import annotations

import ray

if ray.is_initialized() and ray.get_runtime_context().worker.mode == ray.WORKER_MODE:
    raise ImportError("driver_only.py is not available on this node")


def idle(ctx: object) -> None:
    return None


def judge(state: object, proposal: object) -> None:
    return None  # never reached: the module does not load where the loop runs
