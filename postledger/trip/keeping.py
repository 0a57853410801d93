"""What a trip writes on the paid path, and where it goes when the ledger will not take it.

Every write is fenced by the run's claim on the month (R34): a run that lost its month to
another writes nothing more of it (`MonthLost`). What a paid call taught us (an upstream id,
an output, a gateway's own retries) is never lost: if the ledger cannot take it, or the month
was lost, it goes to the month's spill file (R20, R46), which the next run imports first; and
if the spill cannot take it either, `SpillFailed` carries it in its message. The id of a paid
call is the first thing kept after it, with what a gateway said it did with the same call in
the same write (R23, R42).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from logging import Logger, LoggerAdapter
from typing import Any

from postledger.guards.charges import GatewayRetries, quote_of
from postledger.guards.estimates import Pricing
from postledger.guards.spill import SpillKind, spill_for
from postledger.ledger import Ledger
from postledger.record.db import LedgerUnavailable
from postledger.record.models import BatchRecord, SentBatch
from postledger.record.month_lease import MonthLost
from postledger.settings import Settings
from postledger.trip.port import REAL_CLOCK, Clock, UpstreamPort
from postledger.upstreams.calls import Delivered
from postledger.upstreams.job_counts import job_counts

RunLogger = Logger | LoggerAdapter[Any]


@dataclass
class Trip:
    """What one trip needs, and what the ledger could not take on the way (the trip goes on
    regardless: what it sent is paid for)."""

    ledger: Ledger
    settings: Settings
    port: UpstreamPort
    log: RunLogger
    holder: str | None = None  # the run's claim on the month: every write's fence
    clock: Clock = REAL_CLOCK
    ledger_failure: str | None = field(default=None)
    lost: MonthLost | None = field(default=None)  # the month, lost to another run on the way
    # What one send of each batch marked for a job may cost, reckoned while its request was
    # at hand: a job's batches are held without their posts, and a gateway's retries spilled
    # when the ledger fails are booked with it.
    estimates: dict[str, int | None] = field(default_factory=dict)

    @cached_property
    def pricing(self) -> Pricing:
        """What the trip's sends are priced by: read once a trip, its estimate's rates learned
        from the ledger's confirmed sends so far. The assumed rates if the ledger cannot be
        read, whatever the reason: this may first be asked after a paid call (a gateway's
        retries kept with its id), and an estimate is never worth losing what the call taught
        us; a marking that needs the ledger then fails on its own."""
        try:
            return self.ledger.pricing(self.settings)
        except Exception:  # the driver's own errors too (a connect that fails raises them)
            return Pricing.of(self.settings)

    def failed_to_write(self, exc: Exception) -> None:
        self.ledger_failure = self.ledger_failure or str(exc)

    def check_month(self) -> None:
        """After what a paid call taught us is kept (in the ledger or the spill): a trip of a
        run that lost its month goes no further (the run that holds it settles the batch)."""
        if self.lost is not None:
            raise self.lost

    def keep_task_id(
        self, batch: SentBatch, task_id: str, adopted: str | None = None, *, retried: int = 0
    ) -> None:
        """The paid task's id in the ledger, or else in the spill file; with it, in the same
        write, the `retried` attempts a gateway said it made of the same create."""
        retries = self._chargeable([batch], retried)
        gateway = GatewayRetries(retries, self.pricing)
        try:
            self.ledger.record_task_id(
                batch.batch_id, task_id, adopted=adopted, gateway=gateway, holder=self.holder
            )
        except (LedgerUnavailable, MonthLost) as exc:
            self._spill_id(batch, task_id, retries)
            why = "%s: task id %s kept in the spill file: %s"
            self.log.error(why, batch.batch_id, task_id, exc)
            self._carry_on(exc)

    def keep_job_id(
        self,
        submission_id: str,
        batches: Sequence[SentBatch],
        job_id: str,
        file_id: str | None,
        adopted: str | None = None,
        *,
        retried: int = 0,
    ) -> None:
        """The submission's job id on it and on each of its batches, or else in the spill
        file for each batch; with it, as for `keep_task_id`, a gateway's retries."""
        retries = self._chargeable(batches, retried)
        gateway = GatewayRetries(retries, self.pricing)
        try:
            self.ledger.record_job_id(
                submission_id,
                job_id,
                file_id=file_id,
                adopted=adopted,
                gateway=gateway,
                holder=self.holder,
            )
        except (LedgerUnavailable, MonthLost) as exc:
            for batch in batches:
                self._spill_id(batch, job_id, retries)
            self.log.error("%s: job id %s kept in the spill file: %s", submission_id, job_id, exc)
            self._carry_on(exc)

    def keep_job_counts(self, month: str, job_id: str, raw: Mapping[str, int]) -> None:
        """The counts a running job reported (`request_counts`), normalized and written on
        its submission for `postledger status` and the progress to show. Only a display:
        a write that fails is logged and the trip goes on, as if it had not been tried."""
        counts = job_counts(self.settings.upstream_kind, raw)
        if counts is None:
            return
        try:
            self.ledger.keep_job_counts(month, job_id, counts, holder=self.holder)
        except Exception as exc:  # the counts are only shown: never worth failing a batch
            self.log.warning("%s: the upstream's counts could not be kept: %s", job_id, exc)

    def _spill_id(self, batch: SentBatch, task_id: str, retries: int) -> None:
        facts: dict[str, Any] = {"task_id": task_id}
        if retries:
            facts.update(retries=retries, estimated_cost=self._estimate(batch))
        spill_for(self.settings, batch.batch_id).add(SpillKind.TASK_ID, batch.batch_id, **facts)

    def keep_output(self, batch_id: str, task_id: str | None, output: str, usage: Any) -> bool:
        """The delivered output saved before it is checked (R4), or else spilled: True when
        the ledger took it."""
        try:
            self.ledger.save_output(
                batch_id, output, usage, self.settings.price_book(), holder=self.holder
            )
            return True
        except (LedgerUnavailable, MonthLost) as exc:
            # Paid for and delivered: the next run imports it instead of paying again.
            spill_for(self.settings, batch_id).add(
                SpillKind.OUTPUT, batch_id, task_id=task_id, output=output, usage=usage
            )
            self.log.error("%s: output kept in the spill file: %s", batch_id, exc)
            self._carry_on(exc)
            self.check_month()
            return False

    def spill_output(self, batch_id: str, task_id: str | None, delivered: Delivered) -> None:
        """An output read but not to be written here (the month was lost): spilled, for the
        run that holds the month now, or the next one, to import."""
        spill_for(self.settings, batch_id).add(
            SpillKind.OUTPUT,
            batch_id,
            task_id=task_id,
            output=delivered.output,
            usage=delivered.usage,
        )

    def spill_usage(self, batch_id: str, usage: dict[str, Any]) -> None:
        """What an answer without an output reported it used, for the next run to book."""
        spill_for(self.settings, batch_id).add(SpillKind.USAGE, batch_id, usage=usage)

    def book_gateway_retries(self, batches: Sequence[SentBatch], retried: int) -> None:
        """A create that made nothing we know of (it failed, or its answer was lost), after a
        gateway retried it on its own `retried` times: on the books of each batch it carried,
        in the ledger or else in the spill file (R42)."""
        retries = self._chargeable(batches, retried)
        if retries <= 0:
            return
        settings = self.settings
        for batch in batches:
            batch_id = batch.batch_id
            try:
                self.ledger.count_gateway_retries(
                    batch_id,
                    retries,
                    pricing=self.pricing,
                    holder=self.holder,
                )
            except (LedgerUnavailable, MonthLost) as exc:
                spill_for(settings, batch_id).add(
                    SpillKind.GATEWAY_RETRIES,
                    batch_id,
                    retries=retries,
                    estimated_cost=self._estimate(batch),
                )
                self._carry_on(exc)

    def _chargeable(self, batches: Sequence[SentBatch], retried: int) -> int:
        """Of a gateway's `retried` attempts of a create, how many may have been charged again
        (each may have made the whole request again, every batch it carried): all, unless the
        upstream honours the idempotency key they carried, which answered them with the one
        task."""
        if retried <= 0:
            return 0
        named = ", ".join(b.batch_id for b in batches[:3]) + (" …" if len(batches) > 3 else "")
        if self.port.facts.honours_keys:
            self.log.info("%s: the gateway retried the request %dx on its own", named, retried)
            return 0
        self.log.warning(
            "%s: the gateway retried the request %dx on its own: each may have been charged",
            named,
            retried,
        )
        return retried

    def _estimate(self, batch: SentBatch) -> int | None:
        if batch.batch_id in self.estimates:
            return self.estimates[batch.batch_id]
        if not isinstance(batch, BatchRecord):  # a job's batch: reckoned when it was marked
            return None
        return quote_of(batch, self.pricing).estimated

    def _carry_on(self, exc: LedgerUnavailable | MonthLost) -> None:
        """After a fact was spilled: a ledger that failed stops new work, and the trip goes
        on; a month lost to another run ends the trip once the rest of what it learned is
        kept too (`check_month`)."""
        if isinstance(exc, MonthLost):
            self.lost = self.lost or exc
        else:
            self.failed_to_write(exc)
