"""A spec's folder and modules in a child process that ``multiprocessing`` spawns.

A spawned child is a new interpreter given the parent's ``sys.path`` and nothing else: the spec
folder's finder (which never lets a ``colorsys.py`` beside a spec stand in for the standard
module) was not there, so the child imported the spec's ``colorsys.py`` and broke; and a spec
module, loaded by its path under a name no folder holds, could not be imported there, so a spec
function handed to a pool failed in the child. Real spawned children, both cases.
"""

from __future__ import annotations

import multiprocessing
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pytest

import loopwright as lw

HELPERS = """
import colorsys

def hue(rgb):
    return colorsys.rgb_to_hsv(*rgb)[0]
"""

ACTOR = """
import loopwright as lw
import helpers_c43

def propose(ctx):
    return lw.Proposal(note="p")

def check(state, proposal):
    return lw.Verdict(passed=True, score=1.0)

def hue_of_green():
    return helpers_c43.hue((0, 1, 0))
"""

SPEC = """
name = "children"
project = "p"
[actor]
ref = "actor.py:propose"
[[verifiers]]
ref = "actor.py:check"
[contract.budget]
max_cycles = 2
"""


@pytest.fixture
def spec_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "helpers_c43", raising=False)
    d = tmp_path / "spec"
    d.mkdir()
    (d / "helpers_c43.py").write_text(HELPERS)
    (d / "actor.py").write_text(ACTOR)
    (d / "colorsys.py").write_text("raise RuntimeError('the spec folder shadows colorsys')\n")
    (d / "loop.toml").write_text(SPEC)
    return d


def _spawned() -> ProcessPoolExecutor:
    return ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))


def test_a_spawned_child_imports_the_spec_folder_as_the_parent_does(spec_folder: Path) -> None:
    lw.load_spec(spec_folder / "loop.toml")
    import helpers_c43  # the spec folder's, found as its actor finds it

    with _spawned() as pool:
        assert pool.submit(helpers_c43.hue, (1, 0, 0)).result(timeout=120) == 0.0


def test_a_spawned_child_imports_a_spec_module_by_its_name(spec_folder: Path) -> None:
    (spec_folder / "colorsys.py").unlink()  # this case alone
    loop = lw.load_spec(spec_folder / "loop.toml")
    module = sys.modules[loop.actor.__module__]
    assert module.__name__.startswith("loopwright_spec_actor_")
    with _spawned() as pool:
        assert pool.submit(module.hue_of_green).result(timeout=120) == pytest.approx(1 / 3)


def test_the_childs_finder_follows_the_parents_rule(tmp_path: Path) -> None:
    """``_spec_children._SETUP`` repeats ``_spec_import._SpecFolderFinder``'s rule as text (the child
    cannot import loopwright when it runs): both finders answer alike for a folder's modules
    named as standard ones, its own modules and a name it lacks, so the copy cannot drift."""
    import importlib.machinery as m

    from loopwright import _spec_children, _spec_import

    for name in ("colorsys", "random", "code", "json", "helpers_c43", "pkg_c43"):
        (tmp_path / f"{name}.py").write_text("")
    hooks, meta = list(sys.path_hooks), list(sys.meta_path)
    ns: dict[str, object] = {"FOLDERS": [str(tmp_path)], "MODULES": {}}
    try:
        exec(_spec_children._SETUP, ns)
    finally:  # (the setup installs itself, as in a child: not here)
        sys.path_hooks[:], sys.meta_path[:] = hooks, meta
        sys.path_importer_cache.pop(str(tmp_path), None)
    child = ns["spec_folder_hook"](str(tmp_path))  # type: ignore[operator]
    parent = _spec_import._SpecFolderFinder(
        str(tmp_path),
        (m.ExtensionFileLoader, m.EXTENSION_SUFFIXES),
        (m.SourceFileLoader, m.SOURCE_SUFFIXES),
        (m.SourcelessFileLoader, m.BYTECODE_SUFFIXES),
    )
    for name in ("colorsys", "random", "code", "json", "helpers_c43", "pkg_c43", "absent_c43"):
        mine, theirs = parent.find_spec(name), child.find_spec(name)
        assert (mine and mine.origin) == (theirs and theirs.origin), name
    assert parent.find_spec("colorsys") is None and parent.find_spec("helpers_c43") is not None
