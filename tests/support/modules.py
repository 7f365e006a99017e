"""Load a test module by path: the web tests share test_web.py's helpers (a parked run, a
signed-in client), and are also imported from tests/e2e, where test_web is not importable."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load_sibling(here: str, filename: str, as_name: str) -> ModuleType:
    """The module in ``filename`` beside the file ``here``, loaded under ``as_name``."""
    spec = importlib.util.spec_from_file_location(as_name, Path(here).with_name(filename))
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
