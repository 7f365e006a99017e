"""Executors: where the runs of a batch execute.

``run_on_ray`` fans a batch out over a Ray cluster (the ``ray`` extra); Ray itself is imported
only when it is called, so the core installs and imports without it.
"""

from __future__ import annotations

from .ray import RayBatchError, run_on_ray

__all__ = ["RayBatchError", "run_on_ray"]
