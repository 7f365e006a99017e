"""In-process crashes at deterministic points: ``Crash`` is a ``BaseException`` no engine
handler catches, so nothing after the point where it is raised is written (a process death);
``phase_hook`` raises it at the N-th time the engine reports a phase (``Runtime._on_phase``)."""

from __future__ import annotations

from collections.abc import Callable


class Crash(BaseException):
    """A process death at a deterministic point: nothing after it is written."""


def phase_hook(crash: tuple[str, int] | None) -> Callable[[str], None]:
    """For ``Runtime._on_phase``: raises ``Crash`` the N-th time phase ``PHASE`` is reached
    (``crash=(PHASE, N)``); never with ``None``."""
    seen: dict[str, int] = {}

    def on_phase(phase: str) -> None:
        seen[phase] = seen.get(phase, 0) + 1
        if crash == (phase, seen[phase]):
            raise Crash(f"{phase}:{seen[phase]}")

    return on_phase
