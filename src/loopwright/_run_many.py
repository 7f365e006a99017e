"""``Runtime.run_many``: many tasks run concurrently in this process, at most ``concurrency``
at once, every task and its key checked before any run is written, one run's failure raised
only once the others are done (a mixin of ``Runtime``; its synchronous twin,
``run_many_sync``, is beside the other ``*_sync`` methods in ``_engine``)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ._errors import ConfigError
from ._host import RuntimeHost
from ._json import check_given_text
from ._loop import Loop, check_loop
from ._result import RunResult

if TYPE_CHECKING:
    from ._state import TaskState


class ManyRuns(RuntimeHost):
    """``Runtime.run_many`` (a mixin of ``Runtime``)."""

    if TYPE_CHECKING:

        async def run(
            self,
            loop: Loop,
            task: Mapping[str, Any] | None = None,
            *,
            task_key: str | None = None,
            project: str | None = None,
            by: str | None = None,
        ) -> RunResult: ...  # _engine.Runtime

        def _checked_start(
            self,
            loop: Loop,
            task: Mapping[str, Any] | None,
            task_key: str | None,
            project: str | None,
            by: str | None,
        ) -> tuple[dict[str, Any], str, str, TaskState]: ...  # _run_create.Creating

    async def run_many(
        self,
        loop: Loop,
        tasks: Iterable[Mapping[str, Any]],
        *,
        concurrency: int = 8,
        key_of: Callable[[Mapping[str, Any], int], str] | None = None,
        by: str | None = None,
    ) -> list[RunResult]:
        """Run many tasks concurrently in this process (at most ``concurrency`` at once).
        Each is keyed by ``key_of(task, index)``, else its ``"task_key"`` field (as ``run``:
        a task with neither is a new run each call). ``by``: who starts them, each run's
        requester (see ``create``)."""
        check_given_text(by, field="by")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigError(
                f"must be a whole number of runs, at least 1, got {concurrency!r}",
                field="concurrency",
            )
        if key_of is not None and not callable(key_of):
            raise ConfigError(f"{key_of!r} is not callable", field="key_of")
        if isinstance(tasks, Mapping | str | bytes) or not isinstance(tasks, Iterable):
            raise ConfigError(
                f"must be a list (an iterable) of tasks, got {type(tasks).__name__}", field="tasks"
            )
        check_loop(loop)
        todo = list(tasks)
        keys = [key_of(t, i) if key_of else None for i, t in enumerate(todo)]
        seen: dict[Any, int] = {}
        for i, (t, key) in enumerate(zip(todo, keys, strict=True)):
            given = (
                key if key is not None else t.get("task_key") if isinstance(t, Mapping) else None
            )
            named = str(given) if isinstance(given, int) and not isinstance(given, bool) else given
            if named is None or not isinstance(named, str):
                continue  # a key of its own, or create's to refuse
            if named in seen:
                # one key names one run: two tasks with it would both resume that run (the
                # second refused, this runtime executing it) and the other task never run
                raise ConfigError(
                    f"tasks {seen[named]} and {i} have the same task key {named!r}; give each "
                    "task its own task_key (a key names one run)",
                    field="tasks",
                )
            seen[named] = i
        # Every task checked before any run is written: one refused after others had started
        # left those runs "running", driven by no one. (Checked, then let go: each is made
        # again when its turn comes, so a big batch holds no more initial states than runs;
        # only checked here, so each run's head and versions are encoded once, by create.)
        for i, t in enumerate(todo):
            self._checked_start(loop, t, keys[i], None, None)
        sem = asyncio.Semaphore(concurrency)

        async def one(i: int, t: Mapping[str, Any]) -> RunResult:
            async with sem:
                return await self.run(loop, t, task_key=keys[i], by=by)

        # One run failing (held elsewhere, the store down) leaves none mid-cycle: raised after.
        done = await asyncio.gather(*map(one, range(len(todo)), todo), return_exceptions=True)
        if failed := [r for r in done if isinstance(r, BaseException)]:
            raise failed[0]
        return [r for r in done if isinstance(r, RunResult)]
