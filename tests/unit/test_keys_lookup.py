"""A run looked up by something that is not text: a clear error, not a traceback from deep in
the rule of keys (``_keys.check_lookup``, which ``Store.get_run`` asks first)."""

from __future__ import annotations

import pytest

import loopwright as lw


@pytest.mark.parametrize("given", [None, 123, b"abc"])
def test_a_run_looked_up_by_what_is_not_text_is_a_config_error(given: object) -> None:
    with lw.Runtime(":memory:") as rt, pytest.raises(lw.ConfigError, match="text"):
        rt.store.get_run(given)  # type: ignore[arg-type]
