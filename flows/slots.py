"""Free `ai-batch` slots whose holders are gone, at the start of a flow.

Why this exists: a task run takes its tag slot with a 60 s lease that its process renews every
45 s while it runs (`prefect/task_engine.py`, `concurrency(..., lease_duration=60)`). If that
process is SIGKILLed, nobody releases the slot. A full `prefect server start` has a reaper (the
Repossessor) that gives back expired leases; our local server, like Prefect's ephemeral mode,
runs no services, so the slot stays counted and the next run waits forever. Leases also live in
server memory by default: when the server restarts they vanish while the limit's `active_slots`
count, kept in the database, stays up. `prefect concurrency-limit reset` revokes leases but
leaves that count alone.

The lease is the only liveness signal Prefect gives us: a SIGKILLed task run stays RUNNING in
the API forever, and a flow run can be final while its submitted tasks still run. So:
- slots counted without any unexpired lease are freed by count: nobody renewed them for 60 s,
  or the server forgot them. This is what the Repossessor would give back;
- a slot with an unexpired lease is freed only if its task run belongs to a flow run the caller
  knows is dead (`dead_flow_run_ids`). Otherwise it is kept: until the lease expires, the API
  cannot tell a process killed less than 60 s ago from a live one.

"Counted without a lease" means "held by nobody" only if every slot in the database was taken
through the server we ask: leases live in each server's memory. So slots are freed by count
only while this process runs the one local server of its PREFECT_HOME, which the lock in
flows/local_server.py guarantees. Anywhere else (a full Prefect server, whose reaper does this
itself; a process that merely inherited the local-server flag) a slot leased through another
server would look leaked, and it is left alone.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from uuid import UUID

import httpx
from prefect import get_client
from prefect.client.orchestration import SyncPrefectClient
from prefect.exceptions import ObjectNotFound

from flows.local_server import holds_local_server


def free_stale_slots(
    tag: str = "ai-batch",
    *,
    current_flow_run_id: UUID | None = None,
    dead_flow_run_ids: Collection[UUID] = (),
) -> list[str]:
    """Free the slots of `tag:<tag>` held by no live task run. Returns one line per freeing."""
    name = f"tag:{tag}"
    dead = set(dead_flow_run_ids) - {current_flow_run_id}
    freed: list[str] = []
    with get_client(sync_client=True) as client:
        try:
            limit = client.read_global_concurrency_limit_by_name(name)
            holders = client.read_concurrency_limit_by_tag(tag).active_slots
        except (ObjectNotFound, httpx.HTTPStatusError):
            # No such limit, or a server that cannot list lease holders: without the holders
            # we cannot tell a leaked slot from a busy one, so touch nothing.
            return []
        if not limit.active or limit.active_slots == 0:
            return []

        for task_run_id in holders if dead else []:
            flow_run_id = _flow_run_of(client, task_run_id)
            if flow_run_id not in dead:
                continue
            # Revokes the lease and decrements the count by the lease's slots, in one request.
            client.decrement_v1_concurrency_slots([tag], task_run_id, occupancy_seconds=0.0)
            freed.append(
                f"freed a {name} slot held by task run {task_run_id} of dead flow run {flow_run_id}"
            )

        if not holds_local_server():
            return freed
        unleased = _unleased_slots(client, name, tag)
        if unleased > 0:
            # A slot is counted a moment before its lease is written; a second look a little
            # later keeps us from taking a slot another flow is acquiring right now.
            time.sleep(0.5)
            unleased = min(unleased, _unleased_slots(client, name, tag))
        if unleased > 0:
            # A relative decrement, not a PATCH of active_slots: slots taken or given back by
            # other flows meanwhile stay counted. No occupancy time: it is unknown, and a guess
            # would skew Prefect's averages.
            client.request(
                "POST",
                "/v2/concurrency_limits/decrement",
                json={"names": [name], "slots": unleased},
            )
            freed.append(
                f"freed {unleased} {name} slot(s) counted without a live lease "
                "(no live run holds them: their leases were not renewed for 60 s, or were kept "
                "by a local server that has ended, with the run that took them)"
            )
    return freed


def _flow_run_of(client: SyncPrefectClient, task_run_id: UUID) -> UUID | None:
    try:
        return client.read_task_run(task_run_id).flow_run_id
    except ObjectNotFound:
        # Task runs reach the API through events; a killed process may never have sent its
        # own. Its lease then expires and it is freed by count on a later call.
        return None


def _unleased_slots(client: SyncPrefectClient, name: str, tag: str) -> int:
    """Slots counted by the limit minus slots backed by an unexpired task run lease."""
    # Read the count on both sides of the holder list and keep the smaller: a release that
    # lands in between then cannot make a live slot look unleased.
    before = client.read_global_concurrency_limit_by_name(name).active_slots
    leased = len(client.read_concurrency_limit_by_tag(tag).active_slots)
    after = client.read_global_concurrency_limit_by_name(name).active_slots
    return min(before, after) - leased
