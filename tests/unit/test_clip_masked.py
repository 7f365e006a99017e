"""Error texts the engine stores are cut to ERROR_CHARS (loopwright._modelcalls.clip_masked):
masked in bounded time, only a head kept, and a cut never leaves part of a secret unmasked."""

from __future__ import annotations

import pytest

from loopwright._exec import error_info
from loopwright._modelcalls import CLIPPED, ERROR_CHARS, clip_masked
from loopwright._redact import redact_text, register_secret
from loopwright._redact_shapes import REDACTED

SECRET = "Zq8vSECRETvalue4711xyz"


@pytest.fixture(autouse=True)
def _secret() -> None:
    register_secret(SECRET)


def _kept(out: str, text: str) -> str:
    """The head ``clip_masked`` kept of ``text``, its cut marked with how much it left out."""
    head, mark, _ = out.partition(CLIPPED.split("{", 1)[0])
    assert mark and out == head + CLIPPED.format(n=len(text) - len(head)), out[-60:]
    return head


def test_a_short_text_is_masked_whole() -> None:
    assert clip_masked(f"key {SECRET} here") == "key *** here"


@pytest.mark.parametrize("at", [ERROR_CHARS - 5, ERROR_CHARS - 1, ERROR_CHARS, 2 * ERROR_CHARS - 5])
def test_a_secret_across_the_cut_or_the_window_never_shows_a_part(at: int) -> None:
    text = "x" * at + SECRET + "y" * (10 * ERROR_CHARS)
    out = clip_masked(text)
    assert len(out) <= ERROR_CHARS + 60
    for n in range(4, len(SECRET) + 1):
        assert SECRET[:n] not in out
    # what is kept is the text's head as masked, short of the limit by what a mask took out
    head = _kept(out, text)
    assert text.replace(SECRET, REDACTED).startswith(head)
    assert len(head) >= ERROR_CHARS - len(SECRET)


def test_masking_in_the_head_does_not_let_a_later_secret_in() -> None:
    # masks shorten the window: what is kept of it must not reach a secret cut by its end
    head = (SECRET + " ") * (ERROR_CHARS // (len(SECRET) + 1))
    text = head + "x" * (2 * ERROR_CHARS - len(head) - 5) + SECRET + "y" * ERROR_CHARS
    out = clip_masked(text)
    assert SECRET[:4] not in out
    head = _kept(out, text)  # the masked head, the later secret's beginning cut off
    assert text.replace(SECRET, REDACTED).startswith(head)
    assert len(head) == ERROR_CHARS - head.count(REDACTED) * (len(SECRET) - len(REDACTED))


def test_an_error_with_a_huge_message_is_stored_cut() -> None:
    try:
        raise RuntimeError("boom " + "x" * 10_000_000)
    except RuntimeError as exc:
        info = error_info("actor", exc)
    assert info["message"].startswith("boom ") and len(info["message"]) < ERROR_CHARS + 60
    assert len(info["traceback"]) < ERROR_CHARS + 60


@pytest.mark.parametrize("at", [0, 400, 900, 1990])
def test_a_private_key_longer_than_the_window_is_not_kept_in_part(at: int) -> None:
    # From a review (helper-51): a PEM key longer than the masked window, begun before the
    # cut, had no END line in the window, was not masked, and its first lines were kept.
    body = "\n".join(["MIIEowIBAAKCAQEA" + "Q" * 48] * 60)
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{body}\n-----END RSA PRIVATE KEY-----"
    out = clip_masked("x" * at + pem + " after", 1000)
    assert "MIIEow" not in out and "QQQQ" not in out
    assert len(out) <= 1000 + 40
    # a key cut before its END line, alone, is masked to the end too
    assert redact_text(pem[:500]) == "***"
