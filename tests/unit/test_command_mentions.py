"""Every command line the package and its docs tell a person to type names a command, and
options, that exist (advice47: an escalation's advice said "accept it by hand" and "accept
the run as it is", which no command does; a hint naming a command or option that is not there
is found the same way).

Read from the source with ``ast``: each string the package holds (an f-string with its
``{...}`` parts as placeholders) and each backticked `` `loopwright ...` `` of docs/*.md and the
README. A mention is ``loopwright`` and a word; the word must be a command where the mention is
backticked (in prose, "loopwright itself" is not one), and every ``--option`` up to the end of
the mention (a backtick, ``;``, a parenthesis, a line end) must be one of that command's (of
its subcommand's, for ``users``, ``memory``, ``import``, ``export``)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

from loopwright.cli._app import full_app

ROOT = Path(__file__).resolve().parents[2]
MENTION = re.compile(r"loopwright ([a-z][a-z-]*)((?:[ \t]+[^\s`;()]+)*)")


def _strings(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """Each string constant, an f-string as one text with ``{X}`` for its fields."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                inside.add(id(v))
                if isinstance(v, ast.Constant) and isinstance(v.value, str):
                    parts.append(v.value)
                else:
                    parts.append("{X}")
            yield node.lineno, "".join(parts)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in inside
        ):
            yield node.lineno, node.value


def _texts() -> Iterator[tuple[str, str, bool]]:
    """(where, text, whether the whole text is one backticked mention)."""
    for p in sorted((ROOT / "src" / "loopwright").rglob("*.py")):
        for line, text in _strings(ast.parse(p.read_text(encoding="utf-8"))):
            yield f"{p.relative_to(ROOT)}:{line}", text, False
    for p in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            for m in re.finditer(r"`(loopwright [^`]+)`", line):
                yield f"{p.relative_to(ROOT)}:{i}", m.group(1), True


def _options(cmd: Any) -> set[str]:
    return {o for prm in cmd.params for o in (*prm.opts, *prm.secondary_opts)}


def wrong(text: str, ticked: bool, root: Any) -> list[str]:
    """What is wrong with each mention in ``text`` (``ticked``: ``text`` is one backticked
    mention, as docs hold them; else a mention counts as a command where a backtick opens it)."""
    found = []
    for m in MENTION.finditer(text):
        name, rest = m.group(1), m.group(2)
        cmd = root.commands.get(name)
        if cmd is None:
            if ticked or f"`{m.group(0)}" in text:
                found.append(f"{m.group(0)!r}: no command {name!r}")
            continue
        targets = [cmd]
        if hasattr(cmd, "commands"):  # a group: its subcommand (or subcommands a|b|c)
            sub = (rest.split() or [""])[0]
            if not sub[:1].isalpha():
                continue
            subs = [s for s in re.split(r"\\?\|", sub) if s]
            missing = [s for s in subs if s not in cmd.commands]
            if missing:
                found.append(f"{m.group(0)!r}: no subcommand {', '.join(missing)} of {name}")
                continue
            targets = [cmd.commands[s] for s in subs]
        for opt in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest):
            if not any(opt in _options(t) for t in targets):
                found.append(f"{m.group(0)!r}: {name} has no option {opt}")
    return found


@pytest.fixture(scope="module")
def root() -> Any:
    return typer.main.get_command(full_app())


def test_the_check_finds_a_command_or_option_that_is_not_there(root: Any) -> None:
    assert wrong("accept it: `loopwright accept RUN`", False, root)
    assert wrong("loopwright resume RUN --contract F", True, root)  # (fork's, not resume's)
    assert wrong("then: loopwright resume {X} --budget 5", False, root)
    assert wrong("loopwright users grant NAME", True, root)
    assert not wrong("loopwright itself failed", False, root)  # prose
    assert not wrong("then `loopwright fork {X} --at-cycle 3 --contract F`", False, root)
    assert not wrong("loopwright memory list\\|add --by NAME", True, root)


def test_every_command_line_mentioned_exists(root: Any) -> None:
    found = [f"{where}: {w}" for where, text, ticked in _texts() for w in wrong(text, ticked, root)]
    assert not found, "\n".join(found)
