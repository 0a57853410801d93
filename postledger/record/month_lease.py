"""One run per month at a time (R5, and R22-R24: only a run that is not running any more can
have interrupted batches).

A run claims its month in the ledger and keeps the claim fresh with a heartbeat. Another run
of the same month is refused while the holder is alive: on the same host, while its process
exists; from another host, while its heartbeat is recent. A killed run's claim is taken over at
once on its own host, and after `STALE` elsewhere.

A heartbeat is stamped, and judged, by the database's clock: one clock for every host, so a
host whose own clock runs ahead cannot take a live run's month. The claim's holder is the
fencing token of every write of the paid path (`Ledger._fenced`): a run that lost its month
writes nothing more of it.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlmodel import Session

from postledger.errors import PostledgerError
from postledger.record.claims import STALE, alive_elsewhere
from postledger.record.db import LedgerUnavailable, WriteLocks
from postledger.record.models import MonthRunRecord

HEARTBEAT_SECONDS = 30.0


class MonthBusy(PostledgerError):
    """Another live run is processing this month; the message says which and since when."""


class MonthLost(PostledgerError):
    """This run no longer holds its month (another run took it over): it starts nothing."""


def check_holds(session: Session, month: str, holder: str) -> None:
    """Raise `MonthLost` unless `holder` holds `month` (in the caller's write transaction, so
    that nothing is started by a run that lost its claim a moment ago)."""
    record = session.get(MonthRunRecord, month)
    if record is None or record.holder != holder:
        taken = f"by run {record.holder} on {record.host}" if record is not None else "by nobody"
        raise MonthLost(
            f"this run no longer holds {month}: it is held {taken} (this run's heartbeat was "
            f"missed for over {STALE.seconds} s). It starts no new batch; what it sent is in the "
            "ledger, and the run that holds the month recovers it"
        )


def database_now(session: Session) -> datetime:
    """The database's clock (PostgreSQL's server; SQLite's host, the only one that can open
    its file in WAL mode), in UTC."""
    value = session.connection().execute(select(func.current_timestamp())).scalar_one()
    if isinstance(value, str):  # SQLite answers "YYYY-MM-DD HH:MM:SS", in UTC
        value = datetime.fromisoformat(value)
    assert isinstance(value, datetime)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class MonthLeases:
    def __init__(self, locks: WriteLocks) -> None:
        self._locks = locks
        self._host = socket.gethostname()
        # Claims held by runs of this very process: a claim left by a run of this process that
        # has ended (its release could not be written, say) is no longer held by anyone.
        self._active: set[tuple[str, str]] = set()

    def claim(self, month: str, holder: str) -> str | None:
        """Take the month for `holder`, or raise `MonthBusy` if a live run holds it. Returns
        the run it was taken over from: one that ended without giving it back (a crash)."""
        with self._locks.session(month) as session:
            record = session.get(MonthRunRecord, month)
            now = database_now(session)
            if record is not None and record.holder != holder and self._alive(record, now):
                raise MonthBusy(
                    f"{month} is being processed by another run ({record.holder}, process "
                    f"{record.pid} on {record.host}, last seen {record.heartbeat_at:%H:%M:%S} "
                    "UTC). Wait for it to end, or stop it first; a second run would take its "
                    "batches in flight for interrupted ones."
                )
            dead = record.holder if record is not None and record.holder != holder else None
            record = record or MonthRunRecord(month=month, holder=holder, host="", pid=0)
            record.holder, record.host, record.pid = holder, self._host, os.getpid()
            record.heartbeat_at = now
            session.add(record)
        self._active.add((month, holder))
        return dead

    def beat(self, month: str, holder: str) -> None:
        """Keep the claim fresh; `MonthLost` if another run has taken the month over."""
        with self._locks.session(month) as session:
            check_holds(session, month, holder)
            record = session.get(MonthRunRecord, month)
            assert record is not None
            record.heartbeat_at = database_now(session)
            session.add(record)

    def release(self, month: str, holder: str) -> None:
        self._active.discard((month, holder))
        with self._locks.session(month) as session:
            record = session.get(MonthRunRecord, month)
            if record is not None and record.holder == holder:
                session.delete(record)

    def _alive(self, record: MonthRunRecord, now: datetime) -> bool:
        if record.host == self._host and record.pid == os.getpid():
            return (record.month, record.holder) in self._active
        return alive_elsewhere(record.host, record.pid, record.heartbeat_at, now)

    @contextmanager
    def holding(self, month: str, holder: str) -> Iterator[str | None]:
        """Claim the month, keep the claim fresh while the block runs, give it back after.
        Yields the run the month was taken over from, if any (see `claim`)."""
        dead = self.claim(month, holder)
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(HEARTBEAT_SECONDS):
                try:
                    self.beat(month, holder)
                except LedgerUnavailable:
                    pass  # the run itself reports a ledger failure
                except MonthLost:
                    return  # every batch's start checks the claim in its own transaction

        beating = threading.Thread(target=beat, name=f"postledger-lease-{month}", daemon=True)
        beating.start()
        try:
            yield dead
        finally:
            stop.set()
            beating.join()
            with suppress(LedgerUnavailable):
                self.release(month, holder)
