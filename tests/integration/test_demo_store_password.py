"""`loopwright demo`'s next steps name its store, a URL's password masked (review52a): they
printed the store as resolved, from ``--store`` or ``$LOOPWRIGHT_STORE``, password and all, on
the terminal and in whatever log keeps it (invariant 9), where every other hint that carries
``--store`` (``_options.store_flag``, newuser52) leaves it out: since hints55 the flag names
``"$LOOPWRIGHT_STORE"``, for the person to set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PASSWORD = "hunter2-review52a"


def _cli(*args: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).with_name("loopwright"))
    full = {k: v for k, v in os.environ.items() if k != "LOOPWRIGHT_STORE"} | env
    return subprocess.run(
        [exe, *args], check=False, cwd=cwd, capture_output=True, text=True, env=full
    )


@pytest.mark.postgres
def test_the_demos_next_steps_mask_the_stores_password(pg_url: str, tmp_path: Path) -> None:
    scheme, rest = pg_url.split("://", 1)
    user, at, host = rest.partition("@")
    if not at:
        user, host = "postgres", rest
    if ":" in user:
        pytest.skip("the test server's URL has a password already")
    # (a trusting server takes any password; the URL is as a person with one types it)
    secret = f"{scheme}://{user}:{PASSWORD}@{host}"
    for args, env in (
        (("demo", "--store", secret), {}),
        (("demo",), {"LOOPWRIGHT_STORE": secret}),
    ):
        p = _cli(*args, cwd=tmp_path, env=env)
        assert p.returncode in (0, 4), p.stderr[-2000:]
        steps = p.stdout.split("Try next", 1)[1]
        if env:  # $LOOPWRIGHT_STORE is still set for the next commands: no flag (store_flag)
            assert "--store" not in steps, steps
        else:
            # (hints55: named by the variable, which the person sets, not a masked URL
            # that, typed as printed, tried the password ***)
            assert '--store "$LOOPWRIGHT_STORE"' in steps and "set LOOPWRIGHT_STORE" in steps
        assert PASSWORD not in p.stdout + p.stderr, (args, steps)
