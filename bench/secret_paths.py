"""Invariant 9 under attack: plant known secrets of many shapes through every path by which
user-controlled text reaches a store, then search the store's bytes (the SQLite files, or a
``pg_dump`` of a PostgreSQL database) and every output (``trace`` as JSON lines and
OTLP/JSON, both exports, ``show --json``) for each of them.

Usage:  python bench/secret_paths.py [--pg URL]

Prints, for each path, the secrets found in clear in each output (``LEAK``), then a count.
A path whose text is documented as stored as given (a part's value: the work itself) is
listed apart (``as given``): what it holds is not a leak of the net, but it is reported.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import loopwright as lw
from loopwright.cli import main as cli

# One secret of each shape; each is searched for as it is written (and, for a Basic pair, its
# base64). Distinct middles, so that a hit names its secret.
SECRETS: dict[str, str] = {
    "aws_akid": "AKIAQ3PLANTEDX7Y9Z0W",
    "github": "ghp_" + "Pl4nt3dGithubT0ken0123456789abcdefXY",
    "github_pat": "github_pat_11PLANTED0" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8s9T0",
    "slack": "xoxb-1234567890-0987654321-Pl4ntedSlackT0ken",
    "stripe": "sk_live_" + "Pl4ntedStripeKey0123456789",
    "openai": "sk-proj-" + "Pl4ntedOpenAIkey0123456789abcdefghij",
    "anthropic": "sk-ant-api03-" + "Pl4ntedAnthropicKey0123456789-abcdefgh",
    "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJwbGFudGVkIn0.Pl4ntedJwtSignature0123456789ab",
    "pem": "MIIEpAIBAAKCAQEAPl4ntedPemBody0123456789abcdefghij",
    "db_url_pw": "Pl4ntedDbPassw0rd",
    "bearer": "Pl4ntedBearerT0ken0123456789",
    "basic_pw": "Pl4ntedBasicPw99",
    "cookie": "Pl4ntedCookieSess10n0123",
    "hf": "hf_" + "Pl4ntedHuggingFaceT0ken0123456",
    "google": "AIza" + "SyPl4ntedGoogleKey0123456789abcdef0",
    "aws_secret": "Pl4ntedAwsSecretAccessKey0123456789/abcd",
    "aws_session": "FwoGZXIvYXdzEPl4ntedAwsSessionT0ken0123",
    "sendgrid": "SG." + "Pl4ntedSendGrid012345a" + "." + "b" * 18 + "Pl4ntedSendGridSecret0123",
}
BASIC_B64 = base64.b64encode(f"deploy:{SECRETS['basic_pw']}".encode()).decode()
NEEDLES = {**SECRETS, "basic_b64": BASIC_B64, "user_token": "lw_" + "Pl4ntedW" * 6}


def texts() -> list[str]:
    """Each secret as text would carry it: a log line, a config, a header."""
    s = SECRETS
    pem = "-----BEGIN RSA PRIVATE KEY-----\n" + s["pem"] + "\n-----END RSA PRIVATE KEY-----"
    return [
        f"aws key {s['aws_akid']} in use",
        f"cloned with {s['github']}",
        f"fine-grained {s['github_pat']}",
        f"slack said no to {s['slack']}",
        f"charge failed for {s['stripe']}",
        f"OPENAI: {s['openai']}",
        f"anthropic {s['anthropic']}",
        f"session {s['jwt']}",
        pem,
        f"connect postgresql://app:{s['db_url_pw']}@db.example:5432/prod",
        f"Authorization: Bearer {s['bearer']}",
        f"Authorization: Basic {BASIC_B64}",
        f"Cookie: session={s['cookie']}; theme=dark",
        f"hub {s['hf']}",
        f"maps {s['google']}",
        f"mail {s['sendgrid']}",
        repr(aws_credentials()),
    ]


def aws_credentials() -> dict[str, str]:
    """AWS's temporary credentials as boto3 returns them (PascalCase names)."""
    return {
        "AccessKeyId": SECRETS["aws_akid"].replace("AKIA", "ASIA"),
        "SecretAccessKey": SECRETS["aws_secret"],
        "SessionToken": SECRETS["aws_session"],
    }


ALL = "\n".join(texts())


def _raise(msg: str) -> None:
    raise RuntimeError(msg)


def _check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    finding = lw.Finding(ALL, "doc", "a", "content", evidence={"log": ALL, "list": texts()})
    evidence = {"raw": ALL, "aws": aws_credentials()}
    return lw.Verdict(passed=False, score=0.5, findings=(finding,), evidence=evidence)


def _failing_check(state: lw.TaskState, proposal: lw.Proposal) -> lw.Verdict:
    raise ValueError("verifier blew up:\n" + ALL)


def _reflector(ctx: lw.Context, verdicts: Any) -> str:
    return "reflection: " + ALL


@lw.effect(kind="send", requires_success=False)
def send(to: str) -> dict[str, Any]:
    return {"echo": ALL}


@lw.effect(kind="send", requires_success=False)
def fail(to: str) -> None:
    raise ConnectionError("mail server said:\n" + ALL)


def _calls() -> None:
    """Model calls reported from inside an actor: a record and an own call that fails."""
    lw.record_model_call(
        model="m-" + SECRETS["openai"],
        prompt=[{"role": "system", "content": ALL}, {"role": "user", "content": ALL}],
        reply=ALL,
        started_at=0.0,
        seconds=0.1,
        provider="p " + SECRETS["stripe"],
        error=RuntimeError("E " + ALL),
        finish_reason="stop Bearer " + SECRETS["bearer"],
    )
    with contextlib.suppress(RuntimeError), lw.model_call(model="own", prompt=ALL) as call:
        call.reply(ALL)
        _raise("own call failed: " + ALL)


def _actor(ctx: lw.Context) -> lw.Proposal:
    """Cycle 1: an edit, a note and an effect echoing secrets; 2: a question; 3: escalates."""
    _calls()
    if ctx.cycle == 1:
        return lw.Proposal(
            edits=lw.Proposal.edit("doc", {"a": 1}).edits,
            note="note: " + ALL,
            effects=(lw.EffectCall("send", {"to": "ann"}),),
        )
    if ctx.cycle == 2:
        return lw.Proposal(question=lw.Question("which key? " + ALL))
    return lw.Proposal(escalate="escalating: " + ALL)


def _crashing_actor(ctx: lw.Context) -> lw.Proposal:
    _calls()
    _raise("actor crashed:\n" + ALL)
    raise AssertionError


def _failing_effect_actor(ctx: lw.Context) -> lw.Proposal:
    return lw.Proposal(effects=(lw.EffectCall("fail", {"to": "bob"}),))


def _loop(
    name: str, actor: Any, verifiers: list[Any], cycles: int = 6, action: str = "allow"
) -> lw.Loop:
    policy = lw.ApprovalPolicy((lw.PolicyRule(kind="send", action=action, name="mail"),))
    return lw.Loop(
        name=name,
        actor=actor,
        verifiers=verifiers,
        reflector=_reflector,
        effects=[send, fail],
        approvals=policy,
        contract=lw.Contract(budget=lw.Budget(max_cycles=cycles)),
        retry=lw.RetryPolicy(attempts=1),
    )


def plant(store: str) -> list[str]:
    """Run the planting loops against ``store``; the run ids."""
    task = {"goal": "plant " + ALL, "artifacts": {"doc": {"a": 0}}}
    check = [lw.Check(fn=_check, name="c")]
    ids = []
    with lw.Runtime(store) as rt:
        loop = _loop("plant", _actor, check, action="require")
        r = rt.run_sync(loop, task, task_key="p1")
        ids.append(r.run_id)
        for _ in range(3):  # the effect's approval, then the question
            if r.status != "awaiting_approval":
                break
            [req] = [a for a in rt.store.approvals(run_id=r.run_id) if a.status == "pending"]
            if req.kind == "question":
                rt.answer(r.run_id, "answer: " + ALL, by="ann")
            else:
                rt.approve(r.run_id, by="ann", note="approved: " + ALL)
            r = rt.resume_sync(r.run_id, loop)
        for name, actor, vs in (
            ("crash", _crashing_actor, check),
            ("effect", _failing_effect_actor, check),
            ("verifier", _actor, [lw.Check(fn=_failing_check, name="b")]),
        ):
            ids.append(rt.run_sync(_loop(name, actor, vs, 2), task).run_id)
        rt.memory.add(
            scope="project", scope_key="p", signal="correction", text="mem " + ALL,
            rule={"how": ALL}, source={"from": ALL}, by="ann",
        )  # fmt: skip
        with contextlib.suppress(lw.LoopwrightError):
            rt.edit(r.run_id, "doc/a", 2, by="ann", note="edit note " + ALL)
        with contextlib.suppress(lw.LoopwrightError):
            ids.append(rt.fork(r.run_id, 1, by="ann").run_id)
    return ids


def _cli(*argv: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        contextlib.suppress(SystemExit),
    ):
        cli(list(argv))
    return out.getvalue() + err.getvalue()


def plant_cli(store: str) -> tuple[list[str], str]:
    """The command line's ways in: a note, an answer, an edit's value and note, feedback
    memory's text and rule, a wrong user token, a fork's key; the runs' ids and what the
    commands printed."""
    one = SECRETS["openai"]
    task = {"goal": "cli", "artifacts": {"doc": {"a": 0}}}
    check = [lw.Check(fn=_check, name="c")]
    printed = []
    loop = _loop("cli", _actor, check, action="require")
    with lw.Runtime(store) as rt:
        r = rt.run_sync(loop, task, task_key="cli")
        printed.append(_cli("approve", r.run_id, "--note", "ok " + ALL, "--by", "ann"))
        r = rt.resume_sync(r.run_id, loop)  # to the question
        printed.append(_cli("answer", r.run_id, "answer " + ALL, "--by", "ann", "--note", ALL))
        r = rt.resume_sync(r.run_id, loop)  # to its end
    printed.append(
        _cli("edit", r.run_id, "doc/a", "--value", "3", "--note", "n " + ALL, "--by", "ann")
    )
    printed.append(
        _cli(
            "memory", "add", "mem " + ALL, "--scope", "project", "--key", "p",
            "--rule", json.dumps({"how": ALL}), "--by", "ann",
        )
    )  # fmt: skip
    printed.append(_cli("approve", r.run_id, "--token", "lw_" + "Pl4ntedW" * 6))
    printed.append(_cli("deny", r.run_id, "--note", "no " + one, "--by", "ann"))
    return [r.run_id], "\n".join(printed)


def outputs(store: str, ids: list[str]) -> Iterator[tuple[str, str]]:
    for rid in ids:
        yield f"trace jsonl {rid[:8]}", _cli("trace", rid, "--store", store)
        yield f"trace otlp {rid[:8]}", _cli("trace", rid, "--format", "otlp-json", "--store", store)
        yield f"show --json {rid[:8]}", _cli("show", rid, "--json", "--store", store)
    yield "export eval-cases", _cli("export", "eval-cases", "--store", store)
    yield "memory list", _cli("memory", "list", "--store", store, "--json")
    yield "audit", _cli("audit", "--store", store, "--json")


def found(text: str) -> list[str]:
    return [name for name, s in NEEDLES.items() if s in text]


def report(where: str, text: str, leaks: dict[str, list[str]]) -> None:
    hits = found(text)
    if hits:
        leaks[where] = hits


def _pg_run(pg: str, leaks: dict[str, list[str]]) -> int:
    """Plant into a fresh schema of ``pg``, search its ``pg_dump``; the schema is dropped
    whatever happens. The count of ``***`` in the dump."""
    schema = f"secretpaths_{uuid.uuid4().hex[:8]}"
    store = f"{pg}?options=-csearch_path%3D{schema}"
    subprocess.run(["psql", pg, "-qc", f"create schema {schema}"], check=True)
    try:
        os.environ["LOOPWRIGHT_STORE"] = store
        plant(store)
        report("the commands' output", plant_cli(store)[1], leaks)
        dump = subprocess.run(
            ["pg_dump", pg, "-n", schema], capture_output=True, text=True, check=True
        ).stdout
    finally:
        drop = ["psql", pg, "-qc", f"drop schema {schema} cascade"]
        subprocess.run(drop, check=True, capture_output=True)
    report("pg_dump", dump, leaks)
    return dump.count("***")


def _sqlite_run(leaks: dict[str, list[str]]) -> int:
    """Plant into a SQLite store, search its files and every output; the count of ``***`` in
    the files."""
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "s.db")
        os.environ["LOOPWRIGHT_STORE"] = store
        ids = plant(store)
        cli_ids, printed = plant_cli(store)
        report("the commands' output", printed, leaks)
        raw = b"".join(p.read_bytes() for p in Path(tmp).iterdir())
        report("sqlite files", raw.decode("latin-1"), leaks)
        for where, text in outputs(store, ids + cli_ids):
            report(where, text, leaks)
        return raw.count(b"***")


def main() -> int:
    pg = sys.argv[sys.argv.index("--pg") + 1] if "--pg" in sys.argv else None
    leaks: dict[str, list[str]] = {}
    masked = _pg_run(pg, leaks) if pg else _sqlite_run(leaks)
    for where, hits in leaks.items():
        print(f"LEAK {where}: {', '.join(hits)}")
    # (``masked``: the store holds the planted text, masked: nothing was silently dropped)
    print(json.dumps({"secrets": len(NEEDLES), "masked_in_store": masked, "leaks": len(leaks)}))
    return 1 if leaks else 0


if __name__ == "__main__":
    sys.exit(main())
