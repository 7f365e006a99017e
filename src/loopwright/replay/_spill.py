"""Recorded runs read once from their sources and kept in a temporary file, read back one at a
time as often as asked: what ``fit-stop`` fits on (stop 50). A fit reads its runs three times
(their figures, the hazard tables, then every candidate judged run by run); held in memory,
five runs of 10,000 cycles were 134 MB, and a pool of many long runs grew with every run.
"""

from __future__ import annotations

import pickle
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import fields
from typing import IO, Any

from .._errors import ConfigError
from ._format import Call, CycleTrace, RunTrace, given_runs

__all__ = ["SpilledRuns", "runs_to_fit"]


def _cycle(c: CycleTrace) -> tuple[type[CycleTrace], tuple[Any, ...]]:
    return CycleTrace, tuple(getattr(c, f.name) for f in _CYCLE_FIELDS)


def _call(c: Call) -> tuple[type[Call], tuple[Any, ...]]:
    return Call, (c.who, c.cost_usd, c.tokens, c.unknown_cost)


_CYCLE_FIELDS = fields(CycleTrace)
# A cycle and a call pickled as their constructor's arguments: read back through the
# constructor (a few µs a cycle), not a frozen dataclass's ``__setstate__`` field by field
# (24 µs a cycle: 1.2 s a read of 50,000 cycles, and a fit reads them three times).
_BY_CONSTRUCTOR: dict[type, Callable[[Any], Any]] = {CycleTrace: _cycle, Call: _call}


#: The cycles a pool keeps in memory before it writes the runs after them to the file: a
#: pool of short runs (an LDB file: 164 runs of up to 11 cycles) is read back as fast as a
#: list; past this, about 1 KB a cycle is held at most, and one run at a time beyond it.
HELD_CYCLES = 20_000


class SpilledRuns:
    """``runs``, in order: the first ones in memory up to ``held_cycles`` cycles in all, the
    rest written to an unnamed temporary file (gone when closed, or when the process ends).
    Each iteration reads them back one at a time (iterations may interleave: each keeps its
    own place in the file); a run read back is the reader's alone, nothing here keeps it."""

    def __init__(self, runs: Iterable[RunTrace], *, held_cycles: int | None = None) -> None:
        budget = HELD_CYCLES if held_cycles is None else held_cycles
        self._held: list[RunTrace] = []
        self._fh: IO[bytes] | None = None
        self._n = 0
        self._closed = False
        cycles = 0
        try:
            for t in runs:
                cycles += len(t.cycles)
                if self._fh is None and cycles <= budget:
                    self._held.append(t)
                else:
                    self._spill(t, budget)
            if self._fh is not None:
                self._spill(None, budget)
        except BaseException:
            self.close()
            raise

    def _spill(self, t: RunTrace | None, budget: int) -> None:
        """``t`` written to the file (made at the first); ``None``: what is written flushed. A
        folder or disk that cannot take it is said, naming the folder (a full disk was an
        internal ``OSError``)."""
        try:
            if self._fh is None:
                self._fh = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
            if t is None:
                self._fh.flush()
                return
            out = pickle.Pickler(self._fh, protocol=pickle.HIGHEST_PROTOCOL)
            out.dispatch_table = _BY_CONSTRUCTOR  # (one memo a run: none kept across)
            out.dump(t)
            self._n += 1
        except OSError as exc:
            try:
                where = f"a temporary file in {tempfile.gettempdir()}"
            except OSError:  # (no folder of TMPDIR, TEMP, TMP, /tmp, ... could be written)
                where = "a temporary file, in no folder that could be written"
            raise ConfigError(
                f"the runs read past {budget:,} cycles are kept in {where}, which could not "
                f"be written: {exc.strerror or exc}; set TMPDIR to a folder with room",
                field="TMPDIR",
            ) from None

    @property
    def spilled(self) -> int:
        """How many runs are in the file (not held)."""
        return self._n

    def __len__(self) -> int:
        """How many runs can be read back: none once closed."""
        return len(self._held) + self._n

    def __iter__(self) -> Iterator[RunTrace]:
        """The runs, one at a time; ``ValueError`` once closed (at once, or at the next run of
        an iteration begun before: the file is gone, and a pool that went on with the runs
        held in memory only would pass for all of them)."""
        self._open()
        return self._runs(self._held, self._fh, self._n)

    def _runs(self, held: list[RunTrace], fh: IO[bytes] | None, n: int) -> Iterator[RunTrace]:
        for t in held:
            self._open()
            yield t
        at = 0
        for _ in range(n):
            self._open()
            assert fh is not None
            fh.seek(at)
            t = pickle.load(fh)  # (our own file, written above)
            at = fh.tell()
            yield t

    def _open(self) -> None:
        if self._closed:
            raise ValueError("these recorded runs were closed: read them again from their source")

    def close(self) -> None:
        """Let go of the runs: the held ones, and the file (gone); ``len`` is 0 after, and an
        iteration is refused. Closing again does nothing."""
        self._closed = True
        self._held, self._n = [], 0
        fh, self._fh = self._fh, None
        if fh is not None:
            fh.close()

    def __enter__(self) -> SpilledRuns:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextmanager
def runs_to_fit(traces: Iterable[RunTrace]) -> Iterator[SpilledRuns | list[RunTrace]]:
    """``fit_stop``'s runs, to be read as often as it asks: a list or tuple as it is (held
    already), a ``SpilledRuns`` as it is (its maker closes it), and any other iterable (a
    generator, ``traces_from_store``) read once into a ``SpilledRuns``, closed on leaving: the
    Python API then holds what ``fit-stop`` does, not every run's cycles (stop 52)."""
    if isinstance(traces, SpilledRuns):
        yield traces
    elif isinstance(traces, list | tuple):
        yield list(given_runs(traces))
    else:
        with SpilledRuns(given_runs(traces)) as runs:
            yield runs
