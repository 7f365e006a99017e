"""Invariant 9 for the shapes docs/security.md listed as known misses until secrets47: a
``curl -u`` password in an actor's error, a ``.netrc`` password and a SendGrid key in a
verifier's finding, Docker's base64 ``auth`` and a Twilio SID and secret in its evidence.
Each is planted through the engine into a SQLite store; then the database files are searched
for it byte by byte, and what was stored is read back masked."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from support.planted import planted_run

import loopwright as lw
from loopwright import _redact

CURL_PW = "curlPw-47-planted"
NETRC_PW = "netrcPw47planted"
SG_KEY = "SG." + "aB3dE6gH9jK2mN5pQ8sT1v" + "." + "xY4zA7cD0fG3iJ6lM9oP2rS5uV8wX1zB4dE7gH0jK3m"
SK_SID = "SK" + "0123456789abcdef" * 2
TW_SECRET = "Zq9xW2vB7nM4kL1pR8sT5yU3iO6aE0dF"
DOCKER_AUTH = base64.b64encode(b"bob:dockerPw47planted").decode()


@pytest.fixture(autouse=True)
def _clean_registry() -> None:
    _redact.reset()


def test_the_shapes_found_by_secrets47_are_not_stored(tmp_path: Path) -> None:
    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 2:
            raise RuntimeError(f"exit 22: curl -sf -u deploy:{CURL_PW} https://h/x")
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        finding = lw.Finding(
            f"~/.netrc holds machine h login u password {NETRC_PW}; key {SG_KEY}",
            evidence={
                "docker": {"auths": {"ghcr.io": {"auth": DOCKER_AUTH}}},
                "twilio": f'Client("{SK_SID}", "{TW_SECRET}")',
            },
        )
        return lw.Verdict(passed=False, score=0.5, findings=(finding,))

    packet, _, raw = planted_run(tmp_path, actor, check)
    assert "curl -sf -u deploy:*** https://h/x" in packet  # the error, read back masked
    assert "login u password ***; key ***" in packet
    needles = (CURL_PW, NETRC_PW, SG_KEY, SK_SID, TW_SECRET, DOCKER_AUTH)
    assert [n for n in needles if n.encode() in raw] == []
    assert b"deploy:***" in raw and b"password ***" in raw  # stored, masked: not dropped
