"""What a new user typed first, from outside (helper newuser48): each gave an answer that did
not say how to get what they meant. Real subprocesses, as in ``test_bad_inputs``."""

from __future__ import annotations

from pathlib import Path

from .test_bad_inputs import dump, lw, refused
from .test_cli_mistakes import accepted  # noqa: F401  (a fixture)


def test_a_task_files_bare_id_names_the_key_it_got(
    accepted: tuple[Path, str],  # noqa: F811
    project: Path,
) -> None:
    """`loopwright run` keys a task file's ``{"id": "t"}`` as ``e2e:t``; ``show t`` said only
    "no run 't'", though the run table had shown the key, cut or not."""
    store, _ = accepted
    before = dump(store)
    for command in (("show", "t"), ("approve", "t", "--by", "me")):
        refused(lw(*command, cwd=project, store=store), "no run 't'", "did you mean 'e2e:t'")
    assert dump(store) == before
    # an id no run has gets no guess
    line = refused(lw("show", "nothing-like-it", cwd=project, store=store), "no run")
    assert "did you mean" not in line
