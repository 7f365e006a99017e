"""A payment provider that behaves like Stripe, kept in an SQLite file of its own (outside the
loopwright store), shared by every process of a trial.

* A charge is recorded by its idempotency key; a request with a key seen before moves no
  money: it gets the recorded answer back (the charge, refunded or not, or the decline).
* A declined answer is cached by key: a key declined once is declined again (Stripe keeps it
  for a day). ``decline`` names invoices whose first key is declined.
* ``bug_after`` names invoices whose first charge succeeds and then the effect's own code
  raises (a failure that may have acted).
* Every request is logged in ``requests`` (seq, op, key, pid), which the checks read.
* ``refund_bug``: the first refund acts and then the effect's own code raises (a refund that
  failed after it refunded); ``refund_refused``: every refund is refused (``RefusedError``,
  as a 4xx: the charge is disputed), nothing refunded.
* ``kill`` (``pay:paid``, ``pay:declined``, ``refund``): the first process whose request gets
  that answer is SIGKILLed right after the provider recorded it, inside the effect's call
  (the answer lost, as by a crash between the provider's reply and the effect's return).
"""

from __future__ import annotations

import os
import signal
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import loopwright as lw

SCHEMA = """
CREATE TABLE IF NOT EXISTS charges (
    key TEXT PRIMARY KEY, invoice TEXT NOT NULL, amount REAL NOT NULL,
    status TEXT NOT NULL, refunds INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS requests (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, op TEXT NOT NULL, key TEXT NOT NULL,
    pid INTEGER NOT NULL, answer TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS marks (name TEXT PRIMARY KEY);
"""


class Ledger:
    def __init__(
        self,
        path: Path,
        *,
        decline: str = "",
        bug_after: str = "",
        kill: str = "",
        refunds: str = "",
    ) -> None:
        self.path = path
        self.kill = kill
        self.refunds = refunds
        self.decline = {x for x in decline.split(",") if x}
        self.bug_after = {x for x in bug_after.split(",") if x}
        with closing(self._db()) as db:
            db.executescript(SCHEMA)

    @classmethod
    def from_env(cls) -> Ledger:
        return cls(
            Path(os.environ["MK_DIR"]) / "provider.db",
            decline=os.environ.get("MK_DECLINE", ""),
            bug_after=os.environ.get("MK_BUG_AFTER", ""),
            kill=os.environ.get("MK_PROVIDER_KILL", ""),
            refunds=os.environ.get("MK_REFUNDS", ""),
        )

    def _db(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        db.execute("PRAGMA busy_timeout = 60000")
        return db

    def _log(self, db: sqlite3.Connection, op: str, key: str, answer: str) -> None:
        db.execute(
            "INSERT INTO requests (op, key, pid, answer) VALUES (?, ?, ?, ?)",
            (op, key, os.getpid(), answer),
        )

    def _mark(self, db: sqlite3.Connection, name: str) -> bool:
        """True the first time ``name`` is marked."""
        return db.execute("INSERT OR IGNORE INTO marks VALUES (?)", (name,)).rowcount == 1

    def _commit(self, db: sqlite3.Connection, answered: str) -> None:
        """Commits; then dies if ``answered`` is where this trial kills (once)."""
        die = answered == self.kill and self._mark(db, f"kill:{answered}")
        db.execute("COMMIT")
        if die:
            os.kill(os.getpid(), signal.SIGKILL)

    def note(self, op: str, key: str) -> None:
        """Logs something a run did (its actor's ask) in the request order."""
        with closing(self._db()) as db:
            self._log(db, op, key, "")

    # --- the effect -------------------------------------------------------------------------
    def pay(self, invoice: str, amount: float, key: str) -> dict[str, Any]:
        bug = False
        with closing(self._db()) as db:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute("SELECT status FROM charges WHERE key = ?", (key,)).fetchone()
            if row is not None:
                self._log(db, "pay", key, f"again:{row[0]}")
                db.execute("COMMIT")
                if row[0] == "declined":
                    raise lw.RefusedError(f"card declined (the answer kept for key {key})")
                return {"id": f"ch:{key}", "key": key, "amount": amount}
            declined = invoice in self.decline and self._mark(db, f"declined:{invoice}")
            status = "declined" if declined else "paid"
            db.execute(
                "INSERT INTO charges (key, invoice, amount, status) VALUES (?, ?, ?, ?)",
                (key, invoice, amount, status),
            )
            self._log(db, "pay", key, status)
            if not declined and invoice in self.bug_after:
                bug = self._mark(db, f"bug:{invoice}")
            self._commit(db, f"pay:{status}")
        if declined:
            raise lw.RefusedError(f"card declined (key {key})")
        if bug:
            raise RuntimeError("a bug after the provider charged")
        return {"id": f"ch:{key}", "key": key, "amount": amount}

    def refund(self, key: str, result: Any, args: dict[str, Any]) -> dict[str, Any]:
        with closing(self._db()) as db:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute("SELECT status, refunds FROM charges WHERE key = ?", (key,)).fetchone()
            if row is None or row[0] != "paid":
                self._log(db, "refund", key, "no_charge")
                db.execute("COMMIT")
                raise lw.RefusedError(f"no charge {key} to refund")
            assert result["id"] == f"ch:{key}", (result, key)
            if self.refunds == "refund_refused":
                self._log(db, "refund", key, "refused")
                db.execute("COMMIT")
                raise lw.RefusedError(f"charge ch:{key} is disputed: not refunded")
            db.execute("UPDATE charges SET refunds = refunds + 1 WHERE key = ?", (key,))
            self._log(db, "refund", key, f"refund#{row[1] + 1}")
            bug = self.refunds == "refund_bug" and self._mark(db, "refund_bug")
            self._commit(db, "refund")
        if bug:
            raise RuntimeError("a bug after the provider refunded")
        return {"refunded": f"ch:{key}"}

    # --- the reconcile hooks ----------------------------------------------------------------
    def charged(self, key: str) -> dict[str, Any] | None:
        with closing(self._db()) as db:
            row = db.execute("SELECT amount, status FROM charges WHERE key = ?", (key,)).fetchone()
        if row is None or row[1] != "paid":
            return None
        return {"id": f"ch:{key}", "key": key, "amount": row[0]}

    def refunded(self, key: str) -> dict[str, Any] | None:
        with closing(self._db()) as db:
            row = db.execute("SELECT refunds FROM charges WHERE key = ?", (key,)).fetchone()
        return {"refunded": f"ch:{key}"} if row is not None and row[0] > 0 else None

    # --- what the checks read ---------------------------------------------------------------
    def charges(self) -> list[tuple[str, str, str, int]]:
        with closing(self._db()) as db:
            return list(db.execute("SELECT key, invoice, status, refunds FROM charges"))

    def requests(self) -> list[tuple[int, str, str, int, str]]:
        with closing(self._db()) as db:
            return list(db.execute("SELECT seq, op, key, pid, answer FROM requests ORDER BY seq"))
