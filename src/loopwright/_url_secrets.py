"""A store URL's password kept out of the text of an error (invariant 9: never in an error
message), whoever reads it: the CLI masks its own output, a Python caller's exception (and a
log of it) has only this."""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote, urlsplit

from ._redact import redact_text

# query parameters libpq reads as a password (``?password=``, ``?sslpassword=``)
_PASSWORD_PARAMS = frozenset({"password", "sslpassword"})


def hide_url_secrets(text: str, url: str) -> str:
    """``text`` with ``url``'s password masked wherever it appears: in the URL itself (its
    userinfo, ``?password=``) and wherever else the text quotes it, as written or decoded —
    libpq quotes a malformed one (``invalid percent-encoded token: "…"``), and reads one
    holding a raw ``@`` up to it, naming the rest as the host (``'rest@host'``)."""
    secrets: set[str] = set()
    try:
        parts = urlsplit(url)
        query = parse_qsl(parts.query, keep_blank_values=True)
    except ValueError:  # (not a URL: what redact_text masks is all there is)
        parts, query = None, []
    if parts is not None and "@" in parts.netloc:
        user = parts.netloc.rpartition("@")[0]
        if ":" in user:
            password = user.partition(":")[2]
            secrets.update((password, unquote(password)))
            pieces = password.split("@")
            secrets.update("@".join(pieces[i:]) + "@" for i in range(1, len(pieces)))
    secrets.update(v for k, v in query if k.lower() in _PASSWORD_PARAMS)
    for secret in sorted((s for s in secrets if s.strip("@")), key=len, reverse=True):
        text = text.replace(secret, "***@" if secret.endswith("@") else "***")
    return redact_text(text)
