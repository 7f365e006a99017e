"""``trace --format otlp-json`` keeps the spans written before the run span in a temporary
file (``write_otlp``): a machine with no usable temporary directory (a container with a
read-only root: no writable ``TMPDIR``, /tmp, /var/tmp or working directory) still gets its trace, and a temporary
directory that fills up is a clear error naming it, not an internal error."""

from __future__ import annotations

import errno
import io
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from test_metrics_streaming import _long_loop

import loopwright as lw
from loopwright.cli import main
from loopwright.store import open_store
from loopwright.trace import otlp_trace, write_otlp


def _run(tmp_path: Path) -> tuple[str, str]:
    url = f"sqlite:///{tmp_path / 'r.db'}?durability=process"
    with lw.Runtime(url) as rt:
        r = rt.run_sync(_long_loop(3), {"artifacts": {"doc": {}}}, task_key="w")
    return url, r.run_id


def test_no_usable_temporary_directory_still_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url, run_id = _run(tmp_path)
    with open_store(url) as st:
        want = json.dumps(otlp_trace(st, run_id), separators=(",", ":")) + "\n"
    # the temporary directory tempfile settles on, gone (no candidate was usable: a read-only
    # root; a temporary file there fails as it would)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    with open_store(url) as st:
        out = io.StringIO()
        write_otlp(st, run_id, out)
    assert out.getvalue() == want
    capsys.readouterr()
    code = main(["trace", run_id, "--format", "otlp-json", "--store", url])
    assert code == 0, capsys.readouterr().err
    assert capsys.readouterr().out == want


class _Full(io.StringIO):
    """A temporary file on a full disk: every write fails with ENOSPC, and so does its close
    (a text file's close flushes what it could not write, and fails again). As a real file's,
    the failed close still closes it: a fake left open is closed again by its finalizer, whose
    error Python 3.13 reports (an unraisable exception, a failure here) where 3.11 dropped it."""

    def write(self, s: Any) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    def close(self) -> None:
        super().close()
        raise OSError(errno.ENOSPC, "No space left on device")


def test_full_temporary_directory_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url, run_id = _run(tmp_path)
    monkeypatch.setattr(tempfile, "TemporaryFile", lambda *a, **k: _Full())
    code = main(["trace", run_id, "--format", "otlp-json", "--store", url])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "internal error" not in err
    assert "No space left on device" in err and "TMPDIR" in err, err
