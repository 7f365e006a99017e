"""The engine core imports no backend, adapter or interface (docs/architecture.md), and every
module is on that page's map. Read from the source with ``ast``: what a module imports at its
top level is what importing it costs and what it depends on."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "loopwright"
DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
STDLIB = set(sys.stdlib_module_names) | {"__future__"}
# The store's protocol: what the engine may know of a store. Backends are everything else.
PROTOCOL = {
    "loopwright.store",
    "loopwright.store._base",
    "loopwright.store._records",
    "loopwright.store._people",
    "loopwright.store._live",
    "loopwright.store._protocol_runs",
    "loopwright.store._protocol_checkpoints",
    "loopwright.store._protocol_commit",
    "loopwright.store._protocol_journal",
    "loopwright.store._protocol_approvals",
    "loopwright.store._protocol_memory",
    "loopwright.store._with_newer",
}
# the core's dependencies on the import path (ahocorasick_rs: the redaction net's one pass)
THIRD_PARTY_CORE = {"orjson", "ahocorasick_rs"}
# Imported inside a function, only when asked for: live tracing, when a provider is given;
# following a run's events, when ``Runtime.events`` / ``events_sync`` is called.
LAZY = {"loopwright.trace._live", "loopwright.trace._follow"}
# Test support that lives at the top level but is never imported by the engine.
NOT_CORE = {"_fake_images.py", "testing.py", "__main__.py"}


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, *, top_level: bool) -> set[str]:
    """Absolute names a module imports, at its top level or only inside functions and classes
    (``if TYPE_CHECKING:`` blocks are neither: they cost nothing at run time)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    return _imports_in(path.read_text(encoding="utf-8"), package, top_level=top_level)


def _imports_in(source: str, package: str, *, top_level: bool) -> set[str]:
    tree = ast.parse(source)
    top = {id(n) for n in tree.body}
    typing_only = {
        id(sub)
        for n in tree.body
        if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
        for sub in ast.walk(n)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only or (id(node) in top) != top_level:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                found.add(node.module or "")
                continue
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            if node.module:
                found.add(".".join([*base, node.module]))
            else:  # ``from . import x``: x is a module of that package
                found.update(".".join([*base, a.name]) for a in node.names)
    return found


def _core_modules() -> list[Path]:
    return sorted(p for p in SRC.glob("*.py") if p.name not in NOT_CORE)


# The core: the package itself and the modules directly under it (not its subpackages).
CORE = {"loopwright"} | {f"loopwright.{p.stem}" for p in SRC.glob("*.py") if p.stem != "__init__"}


def _is_core(name: str) -> bool:
    return name in CORE


def _allowed(name: str) -> bool:
    root = name.split(".", maxsplit=1)[0]
    return root in STDLIB or root in THIRD_PARTY_CORE or _is_core(name) or name in PROTOCOL


@pytest.mark.parametrize("path", _core_modules(), ids=lambda p: p.name)
def test_the_core_imports_no_backend_adapter_or_interface(path: Path) -> None:
    bad = {n for n in _imports(path, top_level=True) if not _allowed(n)}
    assert not bad, f"{path.name} imports {sorted(bad)} at its top level"
    late = {n for n in _imports(path, top_level=False) if not _allowed(n) and n not in LAZY}
    assert not late, f"{path.name} imports {sorted(late)} inside a function"


@pytest.mark.parametrize("path", sorted((SRC / "web").glob("*.py")), ids=lambda p: p.name)
def test_the_dashboard_imports_nothing_of_the_cli(path: Path) -> None:
    """notify56: the run page imported ``cli._hint_store``, the refusals ``cli._damage``: what
    both interfaces need lives below them (``_hints``, ``store._damage``)."""
    everything = _imports(path, top_level=True) | _imports(path, top_level=False)
    cli = {n for n in everything if n == "loopwright.cli" or n.startswith("loopwright.cli.")}
    assert not cli, f"web/{path.name} imports {sorted(cli)}"


PROTOCOL_FILES = sorted(
    SRC / "store" / ("__init__.py" if n == "loopwright.store" else f"{n.rsplit('.', 1)[1]}.py")
    for n in PROTOCOL
)


@pytest.mark.parametrize("path", PROTOCOL_FILES, ids=lambda p: p.name)
def test_the_store_protocol_imports_no_backend(path: Path) -> None:
    everything = _imports(path, top_level=True) | _imports(path, top_level=False)
    backends = {"loopwright.store.sqlite", "loopwright.store.postgres", "psycopg"}
    if path.name != "__init__.py":  # open_store picks a backend, lazily, by the URL
        assert not (everything & backends), f"{path.name} imports a backend"
    bad = {n for n in _imports(path, top_level=True) if not _allowed(n)}
    assert not bad, f"{path.name} imports {sorted(bad)} at its top level"


def test_the_rule_catches_a_backend_import() -> None:
    """The check itself can fail: a core module importing the SQLite store, a subpackage or a
    web framework is caught; one importing another core module or the protocol is not."""
    source = (
        "from .store.sqlite import SQLiteStore\nfrom . import web\nimport fastapi\n"
        "from . import _state\nfrom .store import Store\nfrom ._json import dumps\n"
        "def f():\n    from .adapters import openai_chat\n"
    )
    found = _imports_in(source, "loopwright", top_level=True)
    assert _imports_in(source, "loopwright", top_level=False) == {"loopwright.adapters"}
    assert {n for n in found if not _allowed(n)} == {
        "loopwright.store.sqlite",
        "loopwright.web",
        "fastapi",
    }


def test_every_module_is_on_the_map() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = [
        str(p.relative_to(SRC))
        for p in sorted(SRC.rglob("*.py"))
        if f"`{p.relative_to(SRC).as_posix()}`" not in text
    ]
    assert not missing, f"docs/architecture.md does not name {missing}"


_RUNTIME_MODULES = """
import json, sys, loopwright as lw
class Provider:  # stands in for an OpenTelemetry TracerProvider: a tracer, never used here
    def get_tracer(self, *args, **kwargs):
        return object()
rt = lw.Runtime(sys.argv[1]{kwargs})
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[:2] == ["loopwright", "trace"])))
rt.close()
"""


def _trace_modules_after_runtime(
    tmp_path: Path, env: dict[str, str], kwargs: str = ""
) -> list[str]:
    """The ``loopwright.trace`` modules a fresh interpreter holds once it built a ``Runtime``."""
    import json
    import os
    import subprocess

    import loopwright

    base = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    base["PYTHONPATH"] = str(Path(loopwright.__file__).resolve().parents[1])  # this copy
    code = _RUNTIME_MODULES.format(kwargs=kwargs)
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "lw.db")],
        env={**base, **env},
        capture_output=True,
        text=True,
        check=True,
    )
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_a_runtime_that_traces_nothing_loads_no_trace_module(tmp_path: Path) -> None:
    # Live tracing is lazy (the import rule above): without a provider and without an OTLP
    # endpoint in the environment, building a Runtime loads nothing of loopwright.trace.
    assert _trace_modules_after_runtime(tmp_path, {}) == []
    disabled = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_SDK_DISABLED": "true"}
    assert _trace_modules_after_runtime(tmp_path, disabled) == []


def test_a_runtime_given_a_provider_loads_the_live_tracer(tmp_path: Path) -> None:
    # The other side of the condition: a provider given is a tracer built (no span starts
    # here, so a provider whose tracer is never used stands in for one).
    loaded = _trace_modules_after_runtime(tmp_path, {}, kwargs=", tracer_provider=Provider()")
    assert "loopwright.trace._live" in loaded


# What a process that runs loops pays for at start-up (suite53): every SIGKILL trial's child,
# every worker and every CLI command that drives runs imports ``Runtime`` and ``Loop``. These
# are imported where they are used (an effect, a person's edit, a grant, a reversal, an
# HTTP-date in a Retry-After, a mistyped store's name, a new token), not with the engine.
_STARTUP = """
import json, sys, loopwright as lw
from loopwright import _redact_shapes as shapes
lw.Runtime, lw.Loop
print(json.dumps({
    "modules": sorted(sys.modules),
    # (a pattern compiled at import, re.Pattern, has no ``_compiled``: it counts as compiled)
    "compiled": [
        n for n in ("SHAPES", "_TRIGGER") if getattr(getattr(shapes, n), "_compiled", 1) is not None
    ],
}))
"""
NOT_AT_STARTUP = {
    "email.message",
    "email.utils",
    "difflib",
    "secrets",
    "loopwright._effect_run",
    "loopwright._effect_journal",
    "loopwright._earned",
    "loopwright._reversal",
}


def test_importing_the_engine_loads_only_what_running_a_loop_needs() -> None:
    import json
    import os
    import subprocess

    import loopwright

    env = {**os.environ, "PYTHONPATH": str(Path(loopwright.__file__).resolve().parents[1])}
    out = subprocess.run(
        [sys.executable, "-c", _STARTUP], env=env, capture_output=True, text=True, check=True
    )
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert NOT_AT_STARTUP.isdisjoint(seen["modules"]), NOT_AT_STARTUP & set(seen["modules"])
    # the redaction net's shapes (7,000 characters of pattern): compiled by the first text
    # that passes the pre-check, not at import
    assert seen["compiled"] == []


def test_the_shapes_compiled_on_first_use_mask_as_before() -> None:
    from loopwright import _redact_shapes as shapes
    from loopwright._redact import redact_text

    assert redact_text("token=abcdefgh1234 and sk-" + "a" * 40) == "token=*** and ***"
    assert shapes.SHAPES.compiled() is shapes.SHAPES.compiled()  # (once, then kept)
    assert shapes.SHAPES.compiled().pattern == shapes.SHAPES.pattern
