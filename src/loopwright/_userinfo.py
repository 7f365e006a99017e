"""What a POST loopwright sends to a URL it was given (a webhook, a trace collector) needs:
credentials written into the URL (``scheme://user:password@host``) taken out of it, and no
redirect followed.

HTTP clients log and report the URLs they call, and urllib cannot use such a URL at all (it
looks up the whole ``user:password@host`` as the host). The adapters, the trace export and the
webhook notifier each send the pair as the Basic ``Authorization`` header it stands for instead,
from one place, and register the password (the user name where there is no password: a
token written as ``https://TOKEN@host``) and the header's token as secrets, so a server that
echoes either in an error body has it masked (invariant 9).
"""

from __future__ import annotations

import base64
import urllib.request
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from ._redact import register_secret

__all__ = ["NoRedirect", "without_userinfo"]


def without_userinfo(url: str) -> tuple[str, dict[str, str]]:
    """``url`` without its ``user:password@``, and the Basic ``Authorization`` header made of
    it (no header when the URL holds none). The URL returned holds no credential."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, {}
    pair = f"{unquote(parts.username or '')}:{unquote(parts.password or '')}"
    token = base64.b64encode(pair.encode()).decode()
    # Without a password the user name is the credential: ``https://TOKEN@host/`` (GitHub,
    # many proxies) or ``https://KEY:@host/`` (an API key as curl's ``-u KEY:``) is how a
    # token is written into a URL, so it is masked like a password. Beside a password, a
    # user name is an identity, shown as ``user:***``.
    held = parts.password or parts.username
    for secret in (held, unquote(held or ""), token):
        register_secret(secret)
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=netloc)), {"Authorization": f"Basic {token}"}


class NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect answering a POST is a failure (its HTTP status), not followed: urllib would
    resend the POST as a GET without its body, and with the ``Authorization`` header (the
    URL's credentials, or one given) to whatever host the redirect named."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None
