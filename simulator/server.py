"""Running the simulator in the foreground (`postledger sim serve`); `child.py` starts it as a
child process."""

from __future__ import annotations

import logging
import signal
import socket
from types import FrameType

import uvicorn

from processes.children import QuietStop, watch_parent
from simulator.app import create_app
from simulator.child import READY_PREFIX
from simulator.faults import FaultPlan, Faults
from simulator.spool import TemporarySpool
from simulator.upstream import Upstream


class _QuietDeliberateResets(logging.Filter):
    """The `reset` fault breaks responses on purpose; uvicorn would log each as an error."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return "Too little data for declared Content-Length" not in str(exc)


def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    latency: float = 1.0,
    seed: int = 0,
    api_key: str | None = None,
    create_delay: float = 0.0,
    faults: FaultPlan | None = None,
    honour_keys: bool = True,
) -> None:
    """Serve until interrupted; prints one line with the URL once the port is bound."""
    watch_parent()  # started by `postledger run` or a test: never outlive it
    # Made with its protocol named: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on
    # connections accepted from a socket whose protocol says TCP. Without it, an answer's
    # body waited for the client's delayed ACK of its headers: ~40 ms on every request.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound_host, bound_port = sock.getsockname()[:2]
    app = create_app(
        Upstream(latency=latency, seed=seed, honour_keys=honour_keys),
        api_key=api_key,
        create_delay=create_delay,
        faults=Faults(faults),
    )
    # Asked to stop, it drops open requests after a second: a long poll or a held create
    # answer would otherwise keep it up until its parent gives up waiting and kills it.
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=1
    )
    logging.getLogger("uvicorn.error").addFilter(_QuietDeliberateResets())
    logging.getLogger("uvicorn.error").addFilter(QuietStop())  # open requests dropped after 1 s
    spool: TemporarySpool = app.state.spool
    _removed_on_stop(spool)
    print(f"{READY_PREFIX}http://{bound_host}:{bound_port}", flush=True)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        spool.close()


def _removed_on_stop(spool: TemporarySpool) -> None:
    """Remove the simulator's folder when it is stopped by SIGTERM (its parent's stop, the
    lifeline's): uvicorn stops cleanly, then raises the signal again under the handler it
    found, which by default ends the process before any `finally` runs. The handler it finds
    is this one: the folder goes, then the process ends by SIGTERM, as it always did."""

    def stop(signum: int, _frame: FrameType | None) -> None:
        spool.close()
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)

    signal.signal(signal.SIGTERM, stop)
