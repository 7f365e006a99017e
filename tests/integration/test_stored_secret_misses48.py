"""Invariant 9 for the shapes docs/security.md listed as known misses until stop 48: a
``.netrc`` entry with an ``account`` (and one with its password first) in an actor's error, a
Twilio auth token written apart from its account's SID in a verifier's finding, and a short
registered secret (6 bytes) in base64 at an alignment stop 47 did not search, in evidence.
Each is planted through the engine into a SQLite store; then the database files and the trace
are searched for it byte by byte, and what was stored is read back masked."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from support.planted import planted_run

import loopwright as lw
from loopwright import _redact

NETRC_PW = "netrcPw48planted"
NETRC_FIRST_PW = "netrcFirst48pw"
TW_SID = "AC" + "7e2a" * 8
TW_TOKEN = "c4b9" * 8
SHORT = "Zq9!x7"  # 6 bytes: its base64 after one byte was not searched for
SHORT_B64 = base64.b64encode(b"x" + SHORT.encode() + b"-tail").decode()


@pytest.fixture(autouse=True)
def _clean_registry() -> None:
    _redact.reset()


def test_the_shapes_found_by_stop_48_are_not_stored(tmp_path: Path) -> None:
    lw.register_secret(SHORT)

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 2:
            raise RuntimeError(
                f"~/.netrc: machine h login u account acme password {NETRC_PW}\n"
                f"machine g password {NETRC_FIRST_PW} login v"
            )
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        finding = lw.Finding(
            f"twilio account {TW_SID} rejected token {TW_TOKEN}",
            evidence={"request": f"POST /v1 body={SHORT_B64}"},
        )
        return lw.Verdict(passed=False, score=0.5, findings=(finding,))

    packet, trace, raw = planted_run(tmp_path, actor, check)
    assert "account acme password ***" in packet  # the error, read back masked
    assert "machine g password *** login v" in packet
    needles = (NETRC_PW, NETRC_FIRST_PW, TW_TOKEN, SHORT_B64)
    assert [n for n in needles if n.encode() in raw] == []
    assert [n for n in needles if n in trace] == []
    # stored, masked: not dropped (the account's SID is an identifier and stays)
    assert f"account {TW_SID} rejected token ***".encode() in raw
    assert b"body=***" in raw


AWS_SECRET = "Pl4ntedAwsSecret48/abcd0123456789ABCDEFGH"
AWS_SESSION = "FwoGZXIvYXdzEPl4nted48SessionT0ken"


def test_aws_credentials_as_boto3_returns_them_are_not_stored(tmp_path: Path) -> None:
    """``sts.assume_role()["Credentials"]`` names its secrets in PascalCase
    (``SecretAccessKey``, ``SessionToken``): given as a verifier's evidence and printed into an
    actor's error, neither reaches the store."""
    creds = {
        "AccessKeyId": "ASIAQ3PLANTED48XYZ00",
        "SecretAccessKey": AWS_SECRET,
        "SessionToken": AWS_SESSION,
    }

    def actor(ctx: lw.Context) -> lw.Proposal:
        if ctx.cycle == 2:
            raise PermissionError(f"AccessDenied with {creds}")
        return lw.Proposal.edit("doc", {"a": ctx.cycle})

    def check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
        return lw.Verdict(passed=False, score=0.5, evidence={"assumed": creds})

    packet, trace, raw = planted_run(tmp_path, actor, check)
    assert "'SessionToken': '***'" in packet
    assert [s for s in (AWS_SECRET, AWS_SESSION) if s.encode() in raw or s in trace] == []
    assert b'"SecretAccessKey": "***"' in raw or b'"SecretAccessKey":"***"' in raw
