"""Spec folders and spec modules in the child processes ``multiprocessing`` starts afresh.

A child started with the ``spawn`` or ``forkserver`` method is a new interpreter: it is given
the parent's ``sys.path``, and nothing else of how the parent imports. A spec's folder is on
that path, but read by a plain finder, not the parent's ``_SpecFolderFinder``: a module of the
folder named as a standard one (``colorsys.py``, ``random.py``, the ``code.py`` of many specs)
stood in for the standard module in the child, which broke as it imported it. And a spec's own
modules, loaded by their path under names no folder holds (``loopwright_spec_actor_<digest>``),
could not be imported there at all: a spec function handed to a pool failed in the child.

``note_folder`` and ``note_module`` record them; from the first, each child's preparation data
(``multiprocessing.spawn.get_preparation_data``, which both methods send before the child sets
its ``sys.path`` and imports anything of the parent's) carries a setup that the child runs as it
reads that data: the same finder for each spec folder, and a finder of the spec modules by name.
The setup is standard-library code sent as text, run by ``exec``: the child need not be able to
import loopwright at that point (its ``sys.path`` is not the parent's yet). A ``fork`` child
shares the parent's import state and needs none of this.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["note_folder", "note_module"]

_FOLDERS: set[str] = set()
_MODULES: dict[str, str] = {}  # a spec module's name: its file
_LOCK = threading.Lock()
_KEY = "loopwright_spec_setup"  # the preparation data's entry (multiprocessing ignores it)

# The child's setup; FOLDERS and MODULES are given as its globals. Its finder is
# _spec_import._SpecFolderFinder's rule: a folder's module by its bare name, never a standard one.
_SETUP = """
import importlib.machinery as m
import importlib.util
import sys

class SpecFolderFinder(m.FileFinder):
    def find_spec(self, fullname, target=None):
        if fullname in sys.stdlib_module_names:
            return None
        return super().find_spec(fullname, target)

def spec_folder_hook(path, folders=frozenset(FOLDERS)):
    if path not in folders:
        raise ImportError("not a spec folder")
    return SpecFolderFinder(
        path,
        (m.ExtensionFileLoader, m.EXTENSION_SUFFIXES),
        (m.SourceFileLoader, m.SOURCE_SUFFIXES),
        (m.SourcelessFileLoader, m.BYTECODE_SUFFIXES),
    )

class SpecModules:
    files = dict(MODULES)

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        file = cls.files.get(fullname)
        return None if file is None else importlib.util.spec_from_file_location(fullname, file)

sys.path_hooks.insert(0, spec_folder_hook)
for folder in FOLDERS:
    sys.path_importer_cache.pop(folder, None)
sys.meta_path.append(SpecModules)
"""


class _Setup:
    """Pickled as a call of ``exec`` on ``_SETUP``: unpickling it in the child runs it."""

    def __init__(self, folders: list[str], modules: dict[str, str]) -> None:
        self.folders, self.modules = folders, modules

    def __reduce__(self) -> tuple[Any, ...]:
        return exec, (_SETUP, {"FOLDERS": self.folders, "MODULES": self.modules})


def _with_setup(get: Callable[[str], dict[str, Any]]) -> Callable[[str], dict[str, Any]]:
    @functools.wraps(get)
    def get_preparation_data(name: str) -> dict[str, Any]:
        data = get(name)
        with _LOCK:
            data[_KEY] = _Setup(sorted(_FOLDERS), dict(_MODULES))
        return data

    get_preparation_data.loopwright_spec_setup = True  # type: ignore[attr-defined]
    return get_preparation_data


def _install() -> None:
    from multiprocessing import spawn

    if not getattr(spawn.get_preparation_data, "loopwright_spec_setup", False):
        spawn.get_preparation_data = _with_setup(spawn.get_preparation_data)  # type: ignore[assignment]


def note_folder(folder: str) -> None:
    """A spec folder put on ``sys.path``: read by its finder in each child from now on."""
    with _LOCK:
        _FOLDERS.add(folder)
    _install()


def note_module(name: str, file: str) -> None:
    """A spec module loaded by its path: importable by ``name`` in each child from now on."""
    with _LOCK:
        _MODULES[name] = file
    _install()
