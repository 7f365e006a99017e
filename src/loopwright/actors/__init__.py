"""Actors: callables ``Context -> Proposal``. ``replay`` replays recorded outputs."""

from __future__ import annotations

from .replay import NO_MORE_ATTEMPTS, ReplayActor, replay_actor

__all__ = ["NO_MORE_ATTEMPTS", "ReplayActor", "replay_actor"]
