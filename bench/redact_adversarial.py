"""The redaction net's text patterns on adversarial input: each shape's prefix (or a near
miss of it) repeated to fill SIZE characters, masked by ``redact_text``; the best of three
runs at each size. A pattern that backtracks shows as a time growing with the square of the
size (x100 for 10x); a linear one about x10 (memory effects add some past ~100 KB).

Usage:  python bench/redact_adversarial.py [SIZE ...]   (default 30000 300000)

Timings, not instructions: run it on a quiet machine, and read the ratios, not the figures.
"""

from __future__ import annotations

import base64
import sys
import time
import urllib.parse

from loopwright._redact import redact_text, register_secret

# name: the unit repeated (the shape's start, or a near miss the pattern must reject)
UNITS = {
    "flag": "--token ",
    "flag-dashes": "--a-",
    "flag-lowercase": "--token abcdef",
    "flag-password": " --password aaaa",
    "log-colon": "token:",
    "log-no-digit": "token: aaaa ",
    "log-space": "token :a1",
    "secret-colon": "secret: a1",
    "dash-token": "-token-token",
    "url-encoded": "password%3D",
    "url-encoded-pct": "token%3Da%",
    "encoded-url": "a%3A%2F%2F",
    "encoded-url-user": "x%3A%2F%2Fu%3A",
    "encoded-url-pw": "%3Ap",
    "qkey-pwd": "'pwd': '",
    "qkey-cookie": "'set-cookie'",
    "qkey-prefix": "'a-a-",
    "bearer-colon": "bearer:",
    "bearer-space": "bearer ",
    "pem": "-----BEGIN RSA PRIVATE KEY-----",
    "kv": "token=1",
    "conn-escapes": "password=\\\\",
    "prose": "the password and the token: see --token docs. ",
    "plain": "x",
    # stop 45: lower-case option values, argument lists, header lines, pwd=, quoted values
    "flag-low": "--password hunter ",
    "flag-low-prose": "--token option ",
    "flag-low-open": "--token abcdefgh",
    "flag-quoted": "--token '",
    "flag-argv": "'--token', '",
    "cookie": "Cookie: a=",
    "cookie-quoted": 'Cookie: a="',
    "cookie-escaped": "Cookie: a=\\",
    "set-cookie": "set-cookie:",
    "auth-params": "Authorization: X abcdefgh, b=",
    "auth-digest": 'Authorization: Digest a="x", ',
    "pwd": "pwd=",
    "pwd-path": "PWD=/",
    "quoted-open": 'password: "',
    "quoted-escapes": 'password: "a\\"',
    "quoted-nested": 'password: \\"a\\\\\\"',
    "qkey-escapes": "'token': 'a\\'",
    # stop 46: shapes after an escaped line break, a value ending at one, webhooks, PGP
    "escaped-breaks": "\\n",
    "escaped-sk": "\\nsk-",
    "escaped-jwt": "\\neyJabcdefgh.",
    "escaped-bare": "password=a\\n",
    "webhook": "https://hooks.slack.com/services/",
    "pgp": "-----BEGIN PGP PRIVATE KEY BLOCK-----",
    "header-pair": "(b'cookie', b'",
    "header-pair-open": "('authorization', 'abc ",
    # secrets47: curl's -u, .netrc entries, Docker's auth, SendGrid and Twilio
    "curl-u": "curl -u a:b ",
    "curl-u-far": "-u a:b ",
    "curl-u-open": "curl -u ",
    "curl-u-glued": "curl -uaaaa",
    "curl-breaks": "curl\\n-u a:b\\n",
    "netrc": "machine h login u password p ",
    "netrc-near": "machine machine login login ",
    "netrc-login": "default login u account a ",
    "docker-auth": '"auth": "dXNlcjpwdzEy", ',
    "docker-auth-near": '"auth": "AAAA',
    "docker-auth-open": "'auth':'",
    "sendgrid": "SG.aaaaaaaaaaaaaaaaaaaaaa.",
    "twilio-sk": "SK0123456789abcdef0123456789abcdef, ",
    "twilio-ac-pair": "AC0123456789abcdef0123456789abcdef:",
    "capitals": "TASK ACCESS SG. ",
    # stop 48: .netrc's account and password-first forms, camelCase names, Twilio's token
    "netrc-account": "machine h login u account a ",
    "netrc-first": "machine h password p ",
    "netrc-first-open": "default password ",
    "qkey-camel": "'aA'token' ",
    "qkey-camel-run": "'" + "aB" * 40 + "Token' ",
    "qkey-camel-auth": "'xAuthorization ",
    "twilio-ac-hex": "AC0123456789abcdef0123456789abcdef 0123456789abcdef0123456789abcdef ",
    "twilio-hex-run": "AC0123456789abcdef0123456789abcdef " + "0123456789abcdef" * 8,
    # stop 52 (keys52): the new providers' prefixes, a body cut short, a run a key may fill
    "cerebras": "csk-a1b2c3d4e5-",
    "fireworks": "fw_aaaaaaaaaaaaaaaaaaaaaaaaA",
    "fireworks-lower": "fw_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa ",
    "langsmith": "lsv2_pt_0123456789abcdef0123456789abcdef_",
    "doppler": "dp.st.dev.",
    "sentry": "sntrys_eyJhYWFhYWFhYWFhYWFhYWFh_",
    "atlassian": "-ATATT3aaaa",
    "google-run": "-AIza",
    "azure": "AccountKey=",
}

# masked with a secret registered (its base64 forms are searched for too)
SECRET = "hunter2?>>Zq~~9"
UNITS_KNOWN = {
    "b64-no-secret": "QUJD",
    "b64-secret": base64.b64encode(b"x" + SECRET.encode()).decode(),
    "b64-near-miss": base64.b64encode(SECRET.encode()[:-3]).decode(),
    "hex-secret": (b"x" + SECRET.encode()).hex(),
    "hex-near-miss": SECRET.encode()[:-3].hex(),
    "pct-secret": urllib.parse.quote(SECRET, safe="") + "&",
    "plain-known": "x",
}


def best(text: str) -> float:
    times = []
    for _ in range(3):
        t = time.perf_counter()
        redact_text(text)
        times.append(time.perf_counter() - t)
    return min(times)


def rows(units: dict[str, str], sizes: list[int]) -> None:
    for name, unit in units.items():
        ms = [best(unit * (size // len(unit))) * 1000 for size in sizes]
        cells = "".join(f"{m:10.1f}ms" for m in ms)
        print(f"{name:18}{cells}   x{ms[-1] / max(ms[0], 1e-3):.0f}")


def main() -> None:
    sizes = [int(a) for a in sys.argv[1:]] or [30_000, 300_000]
    print(f"{'shape':18}" + "".join(f"{s:>12,}" for s in sizes) + "   ratio last/first")
    rows(UNITS, sizes)
    register_secret(SECRET)
    rows(UNITS_KNOWN, sizes)


if __name__ == "__main__":
    main()
