"""Recovery planning (`plan_recovery` in `postledger/recovery/steps.py`): one step per batch
an earlier run left unfinished, decided from the ledger's rows in memory, with no call.

Rules proved: R21 (a saved output is finished from, no AI call), R22 (a batch sent but never
answered needs a person's yes), R23 (with a saved task id the task is polled, nothing new is
made), R24 (without one it is resubmitted only after a yes, with the double-charge warning
unless the upstream honours idempotency keys), R25 (a batch whose posts all changed is not
reused), R30 (planning is a plain function: looking never calls the AI).
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postledger.defaults import Price
from postledger.guards.estimates import estimate, tokens_of
from postledger.record.kinds import BatchStatus
from postledger.record.rows import InterruptedBatch
from postledger.recovery.steps import RecoveryAction, RecoveryPlan, plan_recovery

# Examples are cheap; no deadline and no example database: the machine is shared, and
# nothing is written outside the test run.
QUICK = settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)

MONTH = "2026-09"
PRICE = Price(input=150_000, output=600_000)
PROMPT = "Analyse each post."


def batch(
    seq: int,
    *,
    status: BatchStatus = BatchStatus.RUNNING,
    task_id: str | None = None,
    raw_output: str | None = None,
    sends: int = 1,
    texts: tuple[str, ...] = ("first post", "second post"),
    keep: int | None = None,
) -> InterruptedBatch:
    """A batch as sent, with the first `keep` of its posts still in it (all: None)."""
    batch_id = f"{MONTH}-b{seq:04d}"
    ids = [f"{batch_id}-p{i}" for i in range(len(texts))]
    return InterruptedBatch(
        batch_id=batch_id,
        seq=seq,
        status=status,
        request=[[pid, text] for pid, text in zip(ids, texts, strict=True)],
        raw_output=raw_output,
        upstream_task_id=task_id,
        sends=sends,
        post_ids=ids[:keep],
    )


def plan(
    *batches: InterruptedBatch, idempotent: bool = False, price: Price | None = None
) -> RecoveryPlan:
    return plan_recovery(batches, idempotent=idempotent, price=price, prompt=PROMPT)


def test_a_saved_output_is_finished_from_locally_without_asking_or_calling() -> None:
    saved = batch(1, status=BatchStatus.RECEIVED, raw_output="[]", task_id="t-1")
    result = plan(saved)
    [step] = result.steps
    assert step.action is RecoveryAction.FINISH_LOCALLY
    assert step.post_ids == saved.post_ids
    assert not result.needs_yes
    assert result.double_charge_tokens == 0


def test_a_running_batch_with_a_spilled_output_is_finished_from_it_too() -> None:
    [step] = plan(batch(1, raw_output='[{"id": "x"}]')).steps
    assert step.action is RecoveryAction.FINISH_LOCALLY


def test_a_saved_task_id_is_polled_only_after_a_yes_and_nothing_new_is_made() -> None:
    result = plan(batch(1, task_id="t-42"))
    [step] = result.steps
    assert step.action is RecoveryAction.POLL
    assert "t-42" in step.why and "no new task" in step.why
    assert result.needs_yes
    assert result.resubmit_tokens == 0
    assert result.double_charge_cost == 0


def test_no_task_id_means_a_resubmission_only_after_a_yes_with_the_double_charge_warning() -> None:
    interrupted = batch(1, sends=2, texts=("a" * 40, "b" * 41))
    result = plan(interrupted, idempotent=False, price=PRICE)
    [step] = result.steps
    assert step.action is RecoveryAction.RESUBMIT
    assert result.needs_yes
    assert "charged twice" in step.why and "sent 2x" in step.why
    assert step.chars == 81
    assert result.resubmit_tokens == tokens_of(81)
    assert result.double_charge_tokens == tokens_of(81)
    assert step.estimated_cost == estimate(PRICE, PROMPT, ["a" * 40, "b" * 41]) > 0
    assert result.double_charge_cost == step.estimated_cost
    summary = result.summary()
    assert summary["possible_double_charge_cost"] == step.estimated_cost
    assert summary["groups"]["resubmit"]["batches"] == [interrupted.batch_id]


def test_a_resubmission_to_an_upstream_that_honours_keys_cannot_be_charged_twice() -> None:
    result = plan(batch(1), idempotent=True, price=PRICE)
    [step] = result.steps
    assert step.action is RecoveryAction.RESUBMIT
    assert result.needs_yes  # still only after a yes (R22)
    assert "idempotency key" in step.why and "charged twice" not in step.why
    assert result.resubmit_tokens > 0
    assert result.double_charge_tokens == 0
    assert result.double_charge_cost == 0


def test_no_price_means_no_estimate_but_the_tokens_still_warn() -> None:
    result = plan(batch(1), idempotent=False, price=None)
    assert result.steps[0].estimated_cost == 0
    assert result.double_charge_tokens > 0


def test_a_batch_whose_posts_all_changed_is_closed_and_its_output_not_reused() -> None:
    changed = batch(1, status=BatchStatus.RECEIVED, raw_output="[]", keep=0)
    result = plan_recovery([changed], idempotent=False)
    [step] = result.steps
    assert step.action is RecoveryAction.CLOSE
    assert step.post_ids == []
    assert not result.needs_yes


def test_only_the_posts_that_did_not_change_are_recovered() -> None:
    interrupted = batch(1, task_id="t-1", texts=("one", "two", "three"), keep=2)
    result = plan_recovery([interrupted], idempotent=False)
    [step] = result.steps
    assert step.action is RecoveryAction.POLL
    assert step.post_ids == ["2026-09-b0001-p0", "2026-09-b0001-p1"]
    assert step.chars == len("onetwothree")  # a resubmission sends the request as first sent


def test_batches_that_were_never_sent_or_are_finished_have_no_step() -> None:
    statuses = [
        BatchStatus.QUEUED,
        BatchStatus.COMPLETED,
        BatchStatus.FAILED,
        BatchStatus.CANCELLED,
    ]
    result = plan(*[batch(i, status=s) for i, s in enumerate(statuses, start=1)])
    assert result.steps == []
    assert not result.needs_yes


def test_steps_follow_the_batches_start_order() -> None:
    result = plan(batch(3), batch(1, task_id="t-1"), batch(2, raw_output="[]"))
    assert [s.batch_id for s in result.steps] == [
        f"{MONTH}-b0001",
        f"{MONTH}-b0002",
        f"{MONTH}-b0003",
    ]
    assert [s.action for s in result.steps] == [
        RecoveryAction.POLL,
        RecoveryAction.FINISH_LOCALLY,
        RecoveryAction.RESUBMIT,
    ]


# --- properties ---------------------------------------------------------------------------------


@st.composite
def interrupted(draw: st.DrawFn, seq: int) -> InterruptedBatch:
    texts = tuple(draw(st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=5)))
    return batch(
        seq,
        status=draw(st.sampled_from(list(BatchStatus))),
        task_id=draw(st.sampled_from([None, f"t-{seq}"])),
        raw_output=draw(st.sampled_from([None, "[]", "garbage"])),
        sends=draw(st.integers(min_value=1, max_value=3)),
        texts=texts,
        keep=draw(st.integers(min_value=0, max_value=len(texts))),
    )


@QUICK
@given(
    st.integers(min_value=0, max_value=6).flatmap(
        lambda n: st.tuples(*[interrupted(seq) for seq in range(1, n + 1)])
    ),
    st.booleans(),
)
def test_each_unfinished_batch_gets_one_step_and_only_unanswered_sends_need_a_yes(
    cases: tuple[InterruptedBatch, ...], idempotent: bool
) -> None:
    result = plan_recovery(list(reversed(cases)), idempotent=idempotent, price=PRICE, prompt=PROMPT)
    unfinished = [b for b in cases if b.status in (BatchStatus.RUNNING, BatchStatus.RECEIVED)]
    assert [s.batch_id for s in result.steps] == [b.batch_id for b in unfinished]
    for step, record in zip(result.steps, unfinished, strict=True):
        assert step.post_ids == record.post_ids
        if not record.post_ids:
            expected = RecoveryAction.CLOSE  # R25: changed input is new work
        elif record.raw_output is not None:
            expected = RecoveryAction.FINISH_LOCALLY  # R21
        elif record.upstream_task_id:
            expected = RecoveryAction.POLL  # R23
        else:
            expected = RecoveryAction.RESUBMIT  # R24
        assert step.action is expected
    asks = any(s.action in (RecoveryAction.POLL, RecoveryAction.RESUBMIT) for s in result.steps)
    assert result.needs_yes is asks  # R22
    if idempotent:
        assert result.double_charge_tokens == 0 and result.double_charge_cost == 0
    else:
        assert result.double_charge_tokens == result.resubmit_tokens
        resubmits = result.of(RecoveryAction.RESUBMIT)
        assert result.double_charge_cost == sum(s.estimated_cost for s in resubmits)
        assert all(s.estimated_cost > 0 for s in resubmits)
