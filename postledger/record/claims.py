"""When a run's claim on a month is a live run's (R34), judged the same way by the run that
wants the month (`month_lease.py`) and by what a person is shown (`rows.py`). Imports no ORM:
`postledger plan` and `approve` read claims in plain SQL."""

from __future__ import annotations

import os
import socket
from datetime import datetime, timedelta

STALE = timedelta(seconds=90)  # three missed heartbeats


def fresh(heartbeat_at: datetime, now: datetime) -> bool:
    """A heartbeat not yet stale, both times read from the database's clock: one clock for
    every host, whatever each host's own says."""
    return now - heartbeat_at < STALE


def alive_elsewhere(host: str, pid: int, heartbeat_at: datetime, now: datetime) -> bool:
    """Whether the claim is a live run's, for a process other than the claimer's own: on
    another host while its heartbeat is fresh; on this one while, besides, its process exists
    (a killed run's claim is free at once on its own host)."""
    if not fresh(heartbeat_at, now):
        return False
    return host != socket.gethostname() or process_exists(pid)


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by someone else
    return True
