"""A store URL's password never in the text of the error opening it raises (invariant 9): the
CLI masks its own output, but a Python caller's exception (and any log of it) has only this."""

from __future__ import annotations

import pytest

from loopwright import ConfigError, StoreError
from loopwright._url_secrets import hide_url_secrets
from loopwright.store import open_store

_REFUSED_BY_LOOPWRIGHT = [
    "postgresq://u:s3cretpw@127.0.0.1:1/x",  # a mistyped scheme
    "mysql://u:s3cretpw@db.internal/x",
    "sqlite://u:s3cretpw@/x.db#a",  # '#' cuts the path
    "sqlite://u:s3cretpw@/x.db?z=1",  # an unknown option
    "sqlite:///x.db?password=s3cretpw",
]


@pytest.mark.parametrize("url", _REFUSED_BY_LOOPWRIGHT)
def test_a_refused_url_keeps_its_password_out_of_the_error(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        open_store(url)
    assert "s3cretpw" not in str(caught.value)
    assert "s3cretpw" not in caught.value.message


_REFUSED_BY_LIBPQ = [
    # libpq quotes a malformed password ("invalid percent-encoded token: ...")
    "postgresql://u:s3cret%zzpw@127.0.0.1:1/x",
    # libpq reads a password up to a raw '@' and names the rest with the host
    "postgresql://u:s3cret@pw0rd@127.0.0.1:1/x",
    "postgresql://u@127.0.0.1:1/x?password=s3cret%zzpw",
]


@pytest.mark.parametrize("url", _REFUSED_BY_LIBPQ)
def test_libpqs_own_message_keeps_the_password_out(url: str) -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(StoreError) as caught:
        open_store(url)
    text = str(caught.value)
    assert "s3cret" not in text and "pw0rd" not in text and "zzpw" not in text, text
    assert text.startswith("cannot open store postgresql://")


def test_what_is_not_the_password_stays() -> None:
    url = "postgresql://ann:s3cret@pw0rd@db.internal:1/x"
    text = hide_url_secrets("failed to resolve host 'pw0rd@db.internal' (user ann)", url)
    assert text == "failed to resolve host '***@db.internal' (user ann)"
    assert hide_url_secrets("no such table", "postgresql://[bad") == "no such table"
