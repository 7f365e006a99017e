"""What the redaction net catches and what it eats: a corpus of planted secrets (each shape in
the contexts text carries it: a log line, a printed mapping, JSON inside a JSON string, a
config file; the known misses of docs/security.md too), counted caught or missed, and a
corpus of ordinary values that must stay (the shared traces under /work/shared/data, the
examples' files, and generated git SHAs, UUIDs, digests, invoice numbers, base64 image data),
counted as false positives where ``redact`` changes them.

Usage:  python bench/redact_catch.py [--list]   (--list names each miss and false positive)

Counts, not timings: the figures do not depend on the machine.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import random
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from loopwright._redact import redact, redact_text, register_secret

ROOT = Path(__file__).resolve().parent.parent
DATA = Path("/work/shared/data")

TW_SID = "AC" + "9f3b" * 8
TW_TOKEN = "5d1e" * 8  # a Twilio auth token: 32 hex digits
REGISTERED = {6: "Zq9!x7", 7: "Zq9!x7W"}
MYSQL_PWD = "mysqlPw48planted"  # in the environment, as MySQL reads it  # short registered values (base64 of them below)


def secrets() -> Iterator[tuple[str, str, str]]:
    """``(name, text, needle)``: ``needle`` must not survive in ``text``."""
    shapes = {
        "aws": "AKIAQ3PLANTEDX7Y9Z0W",
        "github": "ghp_Pl4nt3dGithubT0ken0123456789abcdefXY",
        "slack": "xoxb-1234567890-0987654321-Pl4ntedSlackT0ken",
        "stripe": "sk_live_Pl4ntedStripeKey0123456789",
        "openai": "sk-proj-Pl4ntedOpenAIkey0123456789abcdefghij",
        "anthropic": "sk-ant-api03-Pl4ntedAnthropicKey0123456789-abcdefgh",
        "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.Pl4ntedJwtSignature0123456789ab",
        "google": "AIzaSyPl4ntedGoogleKey0123456789abcdef0",
        "hf": "hf_Pl4ntedHuggingFaceT0ken0123456",
        # other providers' keys (stop 48, keys48: _redact_keys), at their documented lengths
        "groq": "gsk_Pl4ntedGroqKey" + "Ab1" * 12,
        "xai": "xai-Pl4ntedXaiKey" + "Ab12" * 16,
        "perplexity": "pplx-Pl4ntedPerplexity" + "ab12" * 8,
        "npm": "npm_Pl4ntedNpmT0ken" + "aB" * 10 + "x",
        "pypi": "pypi-AgEIcHlwaS5vcmcPl4ntedPyPI" + "Ab_-" * 10,
        "google-oauth": "ya29.a0Pl4ntedGoogleAccess" + "T0k" * 5,
        "google-client": "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",
        "slack-app": "xapp-1-A0PL4NTED-1234567890-" + "9f3b5d1e" * 8,
        "digitalocean": "dop_v1_" + "9f3b5d1e" * 8,
        "shopify": "shpat_" + "9f3b5d1e" * 4,
        "replicate": "r8_Pl4ntedReplicateT0ken" + "Ab" * 8,
    }
    for name, key in shapes.items():
        yield name, f"using {key} now", key
        yield name + "/json", json.dumps({"msg": f"key={key}"}), key
        yield name + "/printed", repr({"note": f"line one\n{key}"}), key
        yield name + "/nested-json", json.dumps(json.dumps({"k": f"\t{key}"})), key
    pw = "Pl4ntedPassw0rd"
    yield "db-url", f"postgresql://app:{pw}@db:5432/x", pw
    yield "db-url/json", json.dumps({"dsn": f"mysql://root:{pw}@h/db"}), pw
    yield "bearer", f"Authorization: Bearer {pw}xyz", pw
    basic = base64.b64encode(f"bob:{pw}".encode()).decode()
    yield "basic", f"Authorization: Basic {basic}", basic
    yield "cookie", f"Cookie: sid={pw}; theme=dark", pw
    yield "set-cookie/pair", repr([(b"set-cookie", f"sid={pw}".encode())]), pw
    pem_body = "MIIEowIBAAKCAQEAPl4ntedPemBody0123456789"
    yield "pem", f"-----BEGIN PRIVATE KEY-----\n{pem_body}\n-----END PRIVATE KEY-----", pem_body
    yield "pem/cut", f"key: -----BEGIN EC PRIVATE KEY-----\\n{pem_body}", pem_body
    yield "env", f"export DB_PASSWORD={pw}", pw
    yield "aws-secret", f"aws_secret_access_key = {pw}/AbCd", pw
    yield "flag", f"deploy --api-key {pw}", pw
    yield "netrc", f"machine h login u password {pw}", pw
    # the known misses of stop 47 (docs/security.md)
    yield "netrc/account", f"machine h login u account acme password {pw}", pw
    yield "netrc/password-first", f"machine h password {pw} login u", pw
    yield (
        "netrc/account-json",
        json.dumps({"f": f"machine h\nlogin u\naccount a\npassword {pw}"}),
        pw,
    )
    yield "twilio/apart", f"twilio sid {TW_SID} token {TW_TOKEN}", TW_TOKEN
    yield "twilio/lines", f"TWILIO={TW_SID}\nTW_TOK={TW_TOKEN}", TW_TOKEN
    yield "twilio/json", json.dumps({"cfg": f"{TW_SID} / {TW_TOKEN}"}), TW_TOKEN
    for n, value in REGISTERED.items():
        for before in range(3):
            blob = base64.b64encode(b"xy"[:before] + value.encode() + b"tail!").decode()
            yield f"b64-{n}-bytes/+{before}", f"data {blob}", blob
    yield "env MYSQL_PWD", f"exit 1: mysql -uroot -p{MYSQL_PWD} shop", MYSQL_PWD
    yield "query authorization", f"GET /v1?authorization=Bearer%20{pw}&x=1", pw
    # camelCase names (AWS's credentials as boto3 returns them, JavaScript's OAuth tokens)
    aws = {
        "AccessKeyId": "ASIAQ3PLANTEDX7Y9Z0W",
        "SecretAccessKey": pw + "/Aws",
        "SessionToken": "Fwo" + pw,
    }
    yield "aws-creds/printed", repr(aws), "Fwo" + pw
    yield "aws-creds/json", json.dumps(aws), "Fwo" + pw
    yield "oauth/camel", repr({"refreshToken": "r" + pw, "expiresIn": 3600}), "r" + pw
    # no shape, no name: not recognisable (documented; counted to show they stay misses)
    yield (
        "hex-alone",
        "deploy with 3f9a1c0e4b7d2a6f8e5c9b1d0a7f3e2c4b6d8a0f1e3c5b7d9f2a4c6e8b0d1f3a",
        "3f9a1c0e4b7d",
    )
    yield (
        "split",
        json.dumps(["sk-proj-Pl4nt", "edOpenAIkey0123456789abcdefghij"]),
        "edOpenAIkey0123",
    )


def records() -> Iterator[tuple[str, Any, str]]:
    """``(name, record, needle)``: a mapping whose ``needle`` must not survive ``redact``."""
    pw = "Pl4ntedPassw0rd"
    aws = {"AccessKeyId": "ASIAQ3PLANTEDX7Y9Z0W", "SecretAccessKey": pw, "SessionToken": "F" + pw}
    yield "aws-creds/SecretAccessKey", {"creds": aws}, pw
    yield "aws-creds/SessionToken", {"creds": aws}, "F" + pw
    yield "oauth/refreshToken", {"refreshToken": pw, "expiresIn": 3600}, pw
    yield "js/clientSecret", {"clientId": "app", "clientSecret": pw}, pw
    yield "snake/client_secret", {"client_id": "app", "client_secret": pw}, pw


def ordinary() -> Iterator[tuple[str, Any]]:
    """``(where, value)``: values that must come back unchanged."""
    rng = random.Random(48)
    for i in range(500):
        yield "git sha", hashlib.sha1(str(i).encode()).hexdigest()
        yield "git sha in text", f"commit {hashlib.sha1(str(i).encode()).hexdigest()[:12]} fixed it"
        yield "uuid", str(uuid.UUID(int=rng.getrandbits(128)))
        yield "sha256", "sha256:" + hashlib.sha256(str(i).encode()).hexdigest()
        yield "md5", hashlib.md5(str(i).encode()).hexdigest()
        yield "invoice", f"INV-{2020 + i % 6}-{i:06d} due {rng.randint(1, 28)}/12"
        yield "iban-like", f"ref DE{rng.randint(10, 99)}{rng.getrandbits(60):018d}"
        blob = base64.b64encode(rng.randbytes(3000)).decode()
        yield "base64 image", {"image": f"data:image/png;base64,{blob}"}
        yield "twilio msg", f"message SM{hashlib.md5(str(i).encode()).hexdigest()} from {TW_SID}"
        yield "hex + sid", f"account {TW_SID} sha {hashlib.md5(str(i).encode()).hexdigest()[:16]}"
    yield "prose", "the machine learning password reset page asks for your login"
    yield "prose", "machine learning: login with the account page, password reset below"
    for f in sorted(DATA.rglob("*")) if DATA.exists() else ():
        if f.is_file() and f.suffix in (".json", ".jsonl", ".md"):
            yield from _file_values(f)
    for f in sorted((ROOT / "examples").rglob("*")):
        if f.is_file() and f.suffix in (".py", ".toml", ".json", ".jsonl", ".md", ".txt"):
            yield from _file_values(f)


def _file_values(f: Path) -> Iterator[tuple[str, Any]]:
    text = f.read_text("utf-8", "replace")
    if f.suffix == ".jsonl":
        for line in text.splitlines():
            try:
                yield str(f.relative_to(f.parents[2])), json.loads(line)
            except ValueError:
                yield str(f), line
    elif f.suffix == ".json":
        try:
            yield str(f), json.loads(text)
        except ValueError:
            yield str(f), text
    else:
        yield from ((str(f), line) for line in text.splitlines())


def _strings(v: Any) -> Iterator[str]:
    if isinstance(v, str):
        yield v
    elif isinstance(v, dict):
        for k, x in v.items():
            yield from _strings(k)
            yield from _strings(x)
    elif isinstance(v, list):
        for x in v:
            yield from _strings(x)


def main() -> None:
    listing = "--list" in sys.argv
    for value in REGISTERED.values():
        register_secret(value)
    os.environ["MYSQL_PWD"] = MYSQL_PWD
    cases = [(n, t, needle, False) for n, t, needle in secrets()]
    cases += [(n, r, needle, True) for n, r, needle in records()]
    caught = missed = 0
    for name, given, needle, is_record in cases:
        left = json.dumps(redact(given)) if is_record else redact_text(given)
        if not is_record:
            left += json.dumps(redact({"t": given}))
        if needle in left:
            missed += 1
            if listing:
                print(f"missed  {name}")
        else:
            caught += 1
    values = fp = records_fp = 0
    for where, value in ordinary():
        for s in _strings(value):
            values += 1
            out = redact_text(s)
            if out != s:
                fp += 1
                if listing:
                    print(f"false+  {where}: {s[:100]!r} -> {out[:100]!r}")
        if not isinstance(value, str) and redact(value) != value:
            records_fp += 1
            if listing:
                print(f"false+  {where} (as a record)")
    print(
        json.dumps(
            {
                "caught": caught,
                "missed": missed,
                "texts": values,
                "false_pos_texts": fp,
                "false_pos_records": records_fp,
            }
        )
    )


if __name__ == "__main__":
    main()
