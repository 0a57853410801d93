"""The business policy (`postledger/failures/policy.py`): what happens to a batch and its posts
after each outcome, decided from in-memory ledger records, as tables and as Hypothesis
properties over every kind of failure.

Rules proved: R11 (a rate limit sends the posts to `waiting`, uncharged), R12 (an unusable output
splits the batch once per post), R13 (valid items completed, only the others sent again), R14
(credentials, balance, permission, wrong URL: recorded with their kind, never retried by
themselves, the run stopped with what to fix), R15 (the hard cap of paid attempts, extra
attempts included), R16 (request retries never change a business decision), R17 (one failed
batch does not stop the others), R23 (a saved task id keeps the batch `running`: uncertain is not
failed), R24 (a create that may have reached an upstream without idempotency keys is never
resent by itself), R26 (an unknown task id fails the posts, and makes no new task).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from postledger.analysis.default import Category, Sentiment
from postledger.batches.output import OutputCheck
from postledger.failures.classify import failure_of
from postledger.failures.policy import (
    STOPPING,
    Decision,
    Failure,
    Reach,
    after_failure,
    after_output,
    attempt_cap,
    retry_or_fail,
)
from postledger.guards.breaker import Signal
from postledger.record.models import (
    BatchRecord,
    BatchStatus,
    Charge,
    FailureKind,
    PostRecord,
    PostStatus,
)
from postledger.settings import Limits

# Examples are cheap; no deadline and no example database: the machine is shared, and
# nothing is written outside the test run.
QUICK = settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)

MONTH = "2026-09"
BATCH_ID = "2026-09-b0001"
NOW = datetime(2026, 10, 1, 12, 0, 0, tzinfo=UTC)
LIMITS = Limits(max_attempts=3, max_requeues=5, default_wait=30.0, max_wait=600.0)
# The kinds classification gives an upstream call's failure.
CALL_KINDS = [
    FailureKind.TRANSPORT,
    FailureKind.TASK_UNKNOWN,
    FailureKind.REJECTED,
    FailureKind.RATE_LIMITED,
    FailureKind.AUTH,
    FailureKind.QUOTA,
    FailureKind.PERMISSION,
    FailureKind.UPSTREAM_FAILED,
]
# Ends a post may still come back from by itself (the run plans or sends it again).
AGAIN = {PostStatus.PENDING, PostStatus.QUEUED, PostStatus.WAITING}


def post(
    post_id: str = "p1",
    *,
    attempts: int = 1,
    extra: int = 0,
    requeues: int = 0,
    split: bool = False,
) -> PostRecord:
    """A post as it is while its batch runs: this send's attempt already counted (R3)."""
    return PostRecord(
        month=MONTH,
        post_id=post_id,
        position=0,
        text=f"the text of {post_id}",
        fingerprint="0" * 64,
        status=PostStatus.RUNNING,
        attempts=attempts,
        extra_attempts=extra,
        requeues=requeues,
        split=split,
        batch_id=BATCH_ID,
    )


def posts(count: int) -> list[PostRecord]:
    return [post(f"p{i}") for i in range(1, count + 1)]


def batch_of(
    members: list[PostRecord],
    *,
    sends: int = 1,
    task_id: str | None = None,
    request_retries: int = 0,
    gateway_retries: int = 0,
) -> BatchRecord:
    return BatchRecord(
        batch_id=BATCH_ID,
        month=MONTH,
        seq=1,
        post_ids=[p.post_id for p in members],
        request=[[p.post_id, p.text] for p in members],
        status=BatchStatus.RUNNING,
        idempotency_key="key-2026-09-b0001",
        upstream_task_id=task_id,
        sends=sends,
        charge=Charge.CONFIRMED if task_id else Charge.POSSIBLE,
        request_retries=request_retries,
        gateway_retries=gateway_retries,
    )


def fail(
    members: list[PostRecord],
    failure: Failure,
    *,
    idempotent: bool = False,
    sends: int = 1,
    task_id: str | None = None,
    limits: Limits = LIMITS,
) -> Decision:
    batch = batch_of(members, sends=sends, task_id=task_id)
    return after_failure(batch, members, failure, idempotent=idempotent, limits=limits, now=NOW)


def moves_by_post(decision: Decision) -> dict[str, PostStatus]:
    return {move.post_id: move.to for move in decision.moves}


def analysis(post_id: str) -> dict[str, Any]:
    """`post_id`'s result as the check keeps it: its fields, without the id."""
    return {"category": Category.PRAISE, "sentiment": Sentiment.POSITIVE, "summary": "nice"}


# --- attempt caps (R15) ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("max_attempts", "extra", "cap"), [(3, 0, 3), (3, 2, 5), (1, 0, 1), (1, 1, 2)]
)
def test_a_posts_cap_is_the_limit_plus_what_a_person_granted(
    max_attempts: int, extra: int, cap: int
) -> None:
    assert attempt_cap(post(extra=extra), Limits(max_attempts=max_attempts)) == cap


@pytest.mark.parametrize(
    ("attempts", "extra", "to", "kind"),
    [
        (1, 0, PostStatus.PENDING, None),
        (2, 0, PostStatus.PENDING, None),
        (3, 0, PostStatus.FAILED, FailureKind.ATTEMPTS_EXHAUSTED),
        (3, 1, PostStatus.PENDING, None),
        (4, 1, PostStatus.FAILED, FailureKind.ATTEMPTS_EXHAUSTED),
    ],
)
def test_a_business_retry_is_given_only_while_the_post_has_paid_attempts_left(
    attempts: int, extra: int, to: PostStatus, kind: FailureKind | None
) -> None:
    move = retry_or_fail(
        post(attempts=attempts, extra=extra), "invalid item", FailureKind.INVALID_ITEM, LIMITS
    )
    assert (move.to, move.kind) == (to, kind)
    assert not move.refund


# --- rate limits (R11) ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retry_after", "wait"),
    [(12.5, 12.5), (0.0, 0.0), (None, 30.0), (3600.0, 600.0), (-5.0, 0.0)],
)
@pytest.mark.parametrize("idempotent", [False, True])
def test_a_rate_limit_with_a_usable_wait_sends_the_posts_to_waiting(
    retry_after: float | None, wait: float, idempotent: bool
) -> None:
    members = posts(3)
    failure = Failure(FailureKind.RATE_LIMITED, "HTTP 429", Reach.NEVER, retry_after=retry_after)
    decision = fail(members, failure, idempotent=idempotent)
    assert decision.batch_to is BatchStatus.FAILED
    assert decision.nothing_charged
    assert decision.stop_run is None
    assert decision.halves == []
    for move in decision.moves:
        assert move.to is PostStatus.WAITING
        assert move.not_before == NOW + timedelta(seconds=wait)
        assert move.refund  # planned again afterwards, without a charge
        assert move.requeue
    assert sorted(moves_by_post(decision)) == ["p1", "p2", "p3"]


def test_a_rate_limited_post_that_bounced_too_often_ends_with_its_kind_uncharged() -> None:
    members = [post("p1", requeues=5), post("p2", requeues=4)]
    decision = fail(members, Failure(FailureKind.RATE_LIMITED, "HTTP 429", Reach.NEVER))
    first, second = decision.moves
    assert (first.to, first.kind, first.refund) == (
        PostStatus.FAILED,
        FailureKind.RATE_LIMITED,
        True,
    )
    assert (second.to, second.refund) == (PostStatus.WAITING, True)


def test_a_rate_limit_on_a_resend_under_the_same_key_queues_the_batch_until_the_wait() -> None:
    members = posts(2)
    failure = Failure(FailureKind.RATE_LIMITED, "HTTP 429", Reach.NEVER, retry_after=40.0)
    decision = fail(members, failure, idempotent=True, sends=2)
    assert decision.batch_to is BatchStatus.QUEUED
    assert decision.batch_not_before == NOW + timedelta(seconds=40)
    assert not decision.nothing_charged  # the first send may have been charged
    assert all(m.to is PostStatus.QUEUED and m.requeue and not m.refund for m in decision.moves)


# --- transport failures (R10, R24) ------------------------------------------------------------


@pytest.mark.parametrize("idempotent", [False, True])
def test_a_transport_failure_that_never_reached_the_upstream_plans_the_posts_again_unpaid(
    idempotent: bool,
) -> None:
    decision = fail(
        posts(2),
        Failure(FailureKind.TRANSPORT, "no connection", Reach.NEVER),
        idempotent=idempotent,
    )
    assert decision.batch_to is BatchStatus.FAILED
    assert decision.nothing_charged
    assert all(m.to is PostStatus.PENDING and m.refund and m.requeue for m in decision.moves)
    assert all(m.not_before is None for m in decision.moves)


def test_a_maybe_sent_create_to_an_idempotent_upstream_is_sent_again_under_the_same_key() -> None:
    decision = fail(
        posts(2), Failure(FailureKind.TRANSPORT, "no answer", Reach.MAYBE), idempotent=True
    )
    assert decision.batch_to is BatchStatus.QUEUED
    assert decision.batch_not_before == NOW
    assert not decision.nothing_charged
    assert all(m.to is PostStatus.QUEUED and m.requeue and not m.refund for m in decision.moves)


@pytest.mark.parametrize("sends", [1, 2])
def test_a_non_idempotent_maybe_sent_create_is_never_resent_automatically(sends: int) -> None:
    decision = fail(
        posts(2),
        Failure(FailureKind.TRANSPORT, "no answer", Reach.MAYBE),
        idempotent=False,
        sends=sends,
    )
    assert decision.uncertain
    assert decision.batch_to is BatchStatus.RUNNING
    assert decision.moves == []
    assert decision.halves == []
    assert not decision.nothing_charged
    assert "not sent again without a yes" in decision.why


def test_an_idempotent_resend_of_a_post_that_bounced_too_often_is_left_uncertain() -> None:
    members = [post("p1"), post("p2", requeues=LIMITS.max_requeues)]
    decision = fail(members, Failure(FailureKind.TRANSPORT, "no answer"), idempotent=True)
    assert decision.uncertain
    assert decision.moves == []


def test_a_never_sent_resend_of_a_non_idempotent_batch_gives_back_its_own_send() -> None:
    """Without honoured keys each send is its own attempt and its own possible charge: a
    resend (a person said yes) that never reached the upstream cost nothing, and is given back
    as a first send is; the first send's possible charge stays (`failures/carry_out.py`)."""
    decision = fail(posts(2), Failure(FailureKind.TRANSPORT, "no connection", Reach.NEVER), sends=2)
    assert decision.batch_to is BatchStatus.FAILED and decision.nothing_charged
    assert all(m.to is PostStatus.PENDING and m.refund for m in decision.moves)


def test_a_never_sent_resend_under_an_honoured_key_is_not_given_back() -> None:
    """Under a key the upstream honours, a resend is the first send's attempt again, which
    may have been charged: it is sent again under the same key, never given back."""
    decision = fail(
        posts(2),
        Failure(FailureKind.TRANSPORT, "no connection", Reach.NEVER),
        sends=2,
        idempotent=True,
    )
    assert decision.batch_to is BatchStatus.QUEUED and not decision.nothing_charged
    assert not any(m.refund for m in decision.moves)


# --- stopping failures (R14, R17) -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "hint"),
    [
        (FailureKind.AUTH, "postledger retry --kind auth"),
        (FailureKind.QUOTA, "postledger retry --kind quota"),
        (FailureKind.PERMISSION, "postledger retry --kind permission"),
    ],
)
@pytest.mark.parametrize("idempotent", [False, True])
def test_credentials_balance_and_permission_end_the_posts_with_their_kind_and_stop_the_run(
    kind: FailureKind, hint: str, idempotent: bool
) -> None:
    decision = fail(posts(3), Failure(kind, "refused", Reach.NEVER), idempotent=idempotent)
    assert decision.batch_to is BatchStatus.FAILED
    assert decision.kind is kind
    assert decision.stop_run is not None and hint in decision.stop_run
    assert decision.nothing_charged
    assert all((m.to, m.kind, m.refund) == (PostStatus.FAILED, kind, True) for m in decision.moves)
    assert len(decision.moves) == 3


@pytest.mark.parametrize("kind", sorted(STOPPING))
@pytest.mark.parametrize("idempotent", [False, True])
def test_a_stopping_refusal_of_a_resend_gives_back_only_a_send_of_its_own(
    kind: FailureKind, idempotent: bool
) -> None:
    """The refused resend cost nothing; without honoured keys it was an attempt of its own,
    given back; under an honoured key it was the first send's, which may have been charged."""
    decision = fail(posts(2), Failure(kind, "refused", Reach.NEVER), sends=2, idempotent=idempotent)
    assert decision.batch_to is BatchStatus.FAILED
    assert decision.stop_run is not None
    assert decision.nothing_charged is not idempotent
    own = not idempotent
    assert all(m.to is PostStatus.FAILED and m.refund is own for m in decision.moves)


def test_a_wrong_url_leaves_the_posts_unpaid_for_the_fix_and_stops_the_run() -> None:
    failure = Failure(FailureKind.REJECTED, "404: check the URL", Reach.NEVER, misconfigured=True)
    decision = fail(posts(2), failure)
    assert decision.batch_to is BatchStatus.FAILED
    assert decision.kind is FailureKind.REJECTED
    assert decision.nothing_charged
    assert decision.stop_run is not None and "configuration" in decision.stop_run
    assert all(m.to is PostStatus.PENDING and m.refund and not m.requeue for m in decision.moves)


@pytest.mark.parametrize(
    "failure",
    [
        Failure(FailureKind.REJECTED, "HTTP 400", Reach.NEVER),
        Failure(FailureKind.RATE_LIMITED, "HTTP 429", Reach.NEVER),
        Failure(FailureKind.TRANSPORT, "no answer", Reach.MAYBE),
        Failure(FailureKind.TASK_UNKNOWN, "404 on the task", Reach.MAYBE),
        Failure(FailureKind.UPSTREAM_FAILED, "task failed", Reach.MAYBE),
    ],
)
def test_one_failed_batch_does_not_stop_the_run(failure: Failure) -> None:
    assert fail(posts(2), failure).stop_run is None
    assert fail(posts(2), failure, idempotent=True).stop_run is None


# --- a saved task id (R23, R26) -------------------------------------------------------------------


@pytest.mark.parametrize(
    "failure",
    [
        Failure(FailureKind.TRANSPORT, "poll: no answer", Reach.MAYBE),
        Failure(FailureKind.TRANSPORT, "poll: no connection", Reach.NEVER),
        Failure(FailureKind.TRANSPORT, "task still running after the deadline", Reach.MAYBE),
        Failure(FailureKind.RATE_LIMITED, "poll: HTTP 429", Reach.NEVER, retry_after=5.0),
        Failure(FailureKind.REJECTED, "poll: HTTP 400", Reach.NEVER),
        Failure(FailureKind.AUTH, "poll: HTTP 401", Reach.NEVER),
    ],
)
@pytest.mark.parametrize("idempotent", [False, True])
def test_a_batch_whose_task_id_is_saved_stays_running_until_the_upstream_says(
    failure: Failure, idempotent: bool
) -> None:
    decision = fail(posts(2), failure, task_id="t-1", idempotent=idempotent)
    assert decision.uncertain
    assert decision.moves == []
    assert decision.halves == []
    assert not decision.nothing_charged
    assert "t-1" in decision.why


def test_a_task_the_upstream_no_longer_knows_fails_its_posts_and_makes_no_new_task() -> None:
    decision = fail(
        posts(3), Failure(FailureKind.TASK_UNKNOWN, "HTTP 404", Reach.MAYBE), task_id="t-1"
    )
    assert decision.batch_to is BatchStatus.FAILED
    assert decision.kind is FailureKind.TASK_UNKNOWN
    assert decision.halves == []
    assert not decision.nothing_charged
    assert all(
        (m.to, m.kind, m.refund) == (PostStatus.FAILED, FailureKind.TASK_UNKNOWN, False)
        for m in decision.moves
    )


def test_a_task_the_upstream_failed_is_one_more_paid_attempt_within_the_cap() -> None:
    members = [post("p1", attempts=1), post("p2", attempts=3), post("p3", attempts=3, extra=1)]
    decision = fail(
        members, Failure(FailureKind.UPSTREAM_FAILED, "task failed", Reach.MAYBE), task_id="t-1"
    )
    assert decision.batch_to is BatchStatus.FAILED
    assert moves_by_post(decision) == {
        "p1": PostStatus.PENDING,
        "p2": PostStatus.FAILED,
        "p3": PostStatus.PENDING,
    }
    assert decision.moves[1].kind is FailureKind.ATTEMPTS_EXHAUSTED
    assert not any(m.refund for m in decision.moves)
    assert not decision.nothing_charged


def test_a_task_the_upstream_failed_unbilled_gives_its_charge_back_but_counts_the_attempt() -> None:
    members = [post("p1", attempts=1), post("p2", attempts=3)]
    unbilled = Failure(FailureKind.UPSTREAM_FAILED, "errored", Reach.MAYBE, unbilled=True)
    decision = fail(members, unbilled, task_id="msgbatch_1")
    assert decision.nothing_charged  # the upstream said so: no charge for the batch
    # The cap still holds: an unbilled failure is a try, and tries are bounded.
    assert moves_by_post(decision) == {"p1": PostStatus.PENDING, "p2": PostStatus.FAILED}
    assert not any(m.refund for m in decision.moves)


ACCEPTED_BUT_UNREADABLE = [
    ("task_api", "/v1/tasks", {"status": "queued"}),  # 200 without a task id
    ("task_api", "/v1/tasks", "<html>gateway</html>"),  # 200 that is not JSON
    ("openai_chat", "/chat/completions", "<html>gateway</html>"),
]


@pytest.mark.parametrize(("kind", "path", "body"), ACCEPTED_BUT_UNREADABLE)
def test_a_create_the_upstream_accepted_but_whose_answer_is_unreadable_is_never_resent(
    kind: str, path: str, body: object
) -> None:
    """A 2xx answer to a create that cannot be read is a lost answer: the work may exist and
    be charged (R24, R48). Without idempotency keys it is uncertain, never sent again by
    itself; with keys it may be sent again under the same key only."""
    import asyncio

    import httpx

    from postledger.upstreams.calls import CreateRequest
    from postledger.upstreams.errors import TransportError
    from postledger.upstreams.openai_chat import OpenAIChatClient
    from postledger.upstreams.task_api import TaskApiClient
    from tests.support.ledgers import asked

    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path.endswith(path)
        if isinstance(body, dict):
            return httpx.Response(200, json=body)
        return httpx.Response(200, text=str(body))

    transport = httpx.MockTransport(answer)
    client = (
        TaskApiClient("http://upstream.test", transport=transport)
        if kind == "task_api"
        else OpenAIChatClient("http://upstream.test/v1", transport=transport)
    )
    request = CreateRequest("2026-10-b0001", "m", asked("p"), [("p1", "t1"), ("p2", "t2")], "key")
    with pytest.raises(TransportError) as raised:
        asyncio.run(client.create(request))
    assert raised.value.maybe_sent
    failure = failure_of(raised.value)
    decision = fail(posts(2), failure, idempotent=False)
    assert decision.uncertain, decision
    assert not any(m.to in AGAIN for m in decision.moves)
    assert decision.halves == []


# --- outputs (R12, R13) -------------------------------------------------------------------------


def test_a_valid_output_completes_every_post_and_counts_as_a_delivery() -> None:
    members = posts(3)
    check = OutputCheck(valid={p.post_id: analysis(p.post_id) for p in members})
    decision = after_output(batch_of(members), members, check, LIMITS)
    assert decision.batch_to is BatchStatus.COMPLETED
    assert set(moves_by_post(decision).values()) == {PostStatus.COMPLETED}
    assert decision.signal is Signal.SUCCESS


def test_only_the_invalid_items_are_sent_again_and_the_valid_ones_are_saved() -> None:
    members = [post("p1"), post("p2"), post("p3"), post("p4", attempts=3)]
    check = OutputCheck(
        valid={"p1": analysis("p1")},
        invalid={
            "p2": "invalid item: category: bad",
            "p3": "the output has no item for this post",
            "p4": "invalid item: summary: empty",
        },
    )
    decision = after_output(batch_of(members), members, check, LIMITS)
    assert decision.batch_to is BatchStatus.COMPLETED
    assert moves_by_post(decision) == {
        "p1": PostStatus.COMPLETED,
        "p2": PostStatus.PENDING,
        "p3": PostStatus.PENDING,
        "p4": PostStatus.FAILED,
    }
    assert decision.moves[3].kind is FailureKind.ATTEMPTS_EXHAUSTED
    assert decision.halves == []


def test_a_post_the_check_never_mentions_is_treated_as_missing() -> None:
    members = posts(2)
    check = OutputCheck(valid={"p1": analysis("p1")})
    decision = after_output(batch_of(members), members, check, LIMITS)
    assert moves_by_post(decision) == {"p1": PostStatus.COMPLETED, "p2": PostStatus.PENDING}


@pytest.mark.parametrize(("count", "sizes"), [(2, (1, 1)), (5, (2, 3)), (25, (12, 13))])
def test_an_unusable_output_splits_the_batch_into_two_halves_in_order(
    count: int, sizes: tuple[int, int]
) -> None:
    members = posts(count)
    check = OutputCheck(unusable="the output is not JSON")
    decision = after_output(batch_of(members), members, check, LIMITS)
    assert decision.batch_to is BatchStatus.FAILED
    assert decision.kind is FailureKind.BATCH_INVALID
    assert (len(decision.halves[0]), len(decision.halves[1])) == sizes
    assert decision.halves[0] + decision.halves[1] == [p.post_id for p in members]
    assert decision.moves == []


def test_a_post_that_was_split_once_is_never_split_again() -> None:
    members = [post("p1", split=True), post("p2"), post("p3"), post("p4", split=True)]
    check = OutputCheck(unusable="the output is a JSON dict, not a list")
    decision = after_output(batch_of(members), members, check, LIMITS)
    assert decision.halves == [["p2"], ["p3"]]
    assert moves_by_post(decision) == {"p1": PostStatus.FAILED, "p4": PostStatus.FAILED}
    assert {m.kind for m in decision.moves} == {FailureKind.BATCH_INVALID}


def test_an_unusable_output_ends_the_posts_without_attempts_left_and_splits_the_rest() -> None:
    members = [post("p1", attempts=3), post("p2"), post("p3", attempts=3, extra=1), post("p4")]
    check = OutputCheck(unusable="no item of the output names a post of the batch")
    decision = after_output(batch_of(members), members, check, LIMITS)
    assert decision.halves == [["p2"], ["p3", "p4"]]
    assert moves_by_post(decision) == {"p1": PostStatus.FAILED}
    assert decision.moves[0].kind is FailureKind.ATTEMPTS_EXHAUSTED


def test_a_single_post_that_cannot_be_split_ends_batch_invalid() -> None:
    members = [post("p1")]
    decision = after_output(batch_of(members), members, OutputCheck(unusable="garbage"), LIMITS)
    assert decision.halves == []
    assert [(m.to, m.kind) for m in decision.moves] == [
        (PostStatus.FAILED, FailureKind.BATCH_INVALID)
    ]


# --- properties over every failure --------------------------------------------------------------

limits_st = st.builds(
    Limits,
    max_attempts=st.integers(min_value=1, max_value=4),
    max_requeues=st.integers(min_value=0, max_value=4),
    default_wait=st.floats(min_value=0, max_value=120),
    max_wait=st.floats(min_value=0, max_value=900),
)


@st.composite
def members_st(draw: st.DrawFn, limits: Limits) -> list[PostRecord]:
    """1–8 running posts, each with this send's attempt counted and at most its cap (the ledger
    never marks a post running beyond it)."""
    count = draw(st.integers(min_value=1, max_value=8))
    members = []
    for i in range(count):
        extra = draw(st.integers(min_value=0, max_value=2))
        cap = limits.max_attempts + extra
        members.append(
            post(
                f"p{i}",
                attempts=draw(st.integers(min_value=1, max_value=cap)),
                extra=extra,
                requeues=draw(st.integers(min_value=0, max_value=limits.max_requeues + 1)),
                split=draw(st.booleans()),
            )
        )
    return members


@st.composite
def failure_st(draw: st.DrawFn) -> Failure:
    """Any kind with either reach (wider than classification gives); a misconfiguration only
    as classification makes one: a refusal (a 404 on a call that names no task)."""
    kind = draw(st.sampled_from(CALL_KINDS))
    reach = draw(st.sampled_from(list(Reach)))
    misconfigured = kind is FailureKind.REJECTED and reach is Reach.NEVER and draw(st.booleans())
    return Failure(
        kind,
        "the call failed",
        reach,
        retry_after=draw(st.one_of(st.none(), st.floats(min_value=-10, max_value=5000))),
        misconfigured=misconfigured,
    )


@st.composite
def failure_case(draw: st.DrawFn) -> tuple[BatchRecord, list[PostRecord], Failure, bool, Limits]:
    limits = draw(limits_st)
    members = draw(members_st(limits))
    batch = batch_of(
        members,
        sends=draw(st.integers(min_value=1, max_value=3)),
        task_id=draw(st.sampled_from([None, "t-1"])),
    )
    return batch, members, draw(failure_st()), draw(st.booleans()), limits


Case = tuple[BatchRecord, list[PostRecord], Failure, bool, Limits]


def decide(case: Case) -> Decision:
    batch, members, failure, idempotent, limits = case
    return after_failure(batch, members, failure, idempotent=idempotent, limits=limits, now=NOW)


def assert_within_caps(decision: Decision, members: list[PostRecord], limits: Limits) -> None:
    """Every way back to the upstream leaves room for one more paid attempt under the cap."""
    by_id = {p.post_id: p for p in members}
    for move in decision.moves:
        if move.to in (PostStatus.PENDING, PostStatus.WAITING):
            p = by_id[move.post_id]
            attempts_after = p.attempts - (1 if move.refund else 0)
            assert attempts_after + 1 <= attempt_cap(p, limits), move
    for half in decision.halves:
        for post_id in half:
            assert by_id[post_id].attempts < attempt_cap(by_id[post_id], limits)


@QUICK
@given(failure_case())
def test_a_decision_never_gives_a_post_more_paid_attempts_than_its_cap(case: Case) -> None:
    decision = decide(case)
    _, members, _, idempotent, limits = case
    assert_within_caps(decision, members, limits)
    if any(m.to is PostStatus.QUEUED for m in decision.moves):
        # Sent again under the same key: a new paid attempt only if the upstream could charge
        # it twice, and it never does here.
        assert idempotent


@QUICK
@given(failure_case())
def test_every_post_of_a_decided_batch_gets_exactly_one_move_unless_it_is_uncertain(
    case: Case,
) -> None:
    decision = decide(case)
    _, members, _, _, _ = case
    if decision.uncertain:
        assert decision.moves == [] and decision.halves == []
        assert not decision.nothing_charged
    else:
        moved = [m.post_id for m in decision.moves]
        assert sorted(moved) == sorted(p.post_id for p in members)
        assert decision.halves == []


@QUICK
@given(failure_case())
def test_a_charge_is_given_back_only_for_a_send_of_its_own_that_never_reached_it(
    case: Case,
) -> None:
    decision = decide(case)
    batch, _, failure, idempotent, _ = case
    # Under an honoured key a later send is the first send's attempt again; elsewhere each
    # send is an attempt of its own.
    own_attempt = batch.sends == 1 or not idempotent
    certainly_unsent = failure.reach is Reach.NEVER and own_attempt
    if decision.nothing_charged or any(m.refund for m in decision.moves):
        assert certainly_unsent and batch.upstream_task_id is None
        assert decision.nothing_charged


@QUICK
@given(failure_case())
def test_a_non_idempotent_maybe_sent_create_is_never_resent_by_itself(case: Case) -> None:
    batch, _, failure, idempotent, _ = case
    decision = decide(case)
    if not idempotent:
        assert decision.batch_to is not BatchStatus.QUEUED
        assert all(m.to is not PostStatus.QUEUED for m in decision.moves)
    uncertain_create = failure.reach is Reach.MAYBE and failure.kind not in (
        FailureKind.UPSTREAM_FAILED,  # the upstream said what became of it
        FailureKind.TASK_UNKNOWN,
    )
    if not idempotent and uncertain_create:
        assert decision.uncertain


@QUICK
@given(failure_case())
def test_a_saved_task_id_is_polled_not_replaced_until_the_upstream_says_what_became_of_it(
    case: Case,
) -> None:
    batch, _, failure, _, _ = case
    decision = decide(case)
    if batch.upstream_task_id and failure.kind not in (
        FailureKind.TASK_UNKNOWN,
        FailureKind.UPSTREAM_FAILED,
    ):
        assert decision.uncertain
    if failure.kind is FailureKind.TASK_UNKNOWN and not decision.uncertain:
        assert all(m.to is PostStatus.FAILED for m in decision.moves)


@QUICK
@given(failure_case())
def test_a_run_is_stopped_exactly_for_credentials_balance_permission_and_misconfiguration(
    case: Case,
) -> None:
    _, _, failure, _, _ = case
    decision = decide(case)
    assert (decision.stop_run is not None) == (failure.kind in STOPPING or failure.misconfigured)
    if failure.kind in STOPPING:
        # Never retried by itself: no post goes back towards the upstream.
        assert not any(m.to in AGAIN for m in decision.moves)
        assert decision.halves == []


@QUICK
@given(failure_case())
def test_a_post_waits_only_after_a_rate_limit_and_never_longer_than_the_longest_wait(
    case: Case,
) -> None:
    _, _, failure, _, limits = case
    decision = decide(case)
    # A Retry-After is capped at max_wait; without one, the configured default applies.
    longest = timedelta(seconds=max(limits.max_wait, limits.default_wait))
    for move in decision.moves:
        if move.to is PostStatus.WAITING:
            assert failure.kind is FailureKind.RATE_LIMITED
            assert move.not_before is not None
            assert NOW <= move.not_before <= NOW + longest
        else:
            assert move.not_before is None
    if decision.batch_not_before is not None:
        assert NOW <= decision.batch_not_before <= NOW + longest


@QUICK
@given(
    failure_case(),
    st.integers(min_value=0, max_value=50),
    st.integers(min_value=0, max_value=5),
)
def test_request_retries_never_change_a_business_decision(
    case: Case, request_retries: int, gateway_retries: int
) -> None:
    batch, members, failure, idempotent, limits = case
    retried = batch_of(
        members,
        sends=batch.sends,
        task_id=batch.upstream_task_id,
        request_retries=request_retries,
        gateway_retries=gateway_retries,
    )
    again = after_failure(retried, members, failure, idempotent=idempotent, limits=limits, now=NOW)
    assert again == decide(case)


# --- properties over every output ----------------------------------------------------------------

verdict_st = st.sampled_from(["valid", "invalid", "missing"])


@QUICK
@given(limits_st.flatmap(lambda limits: st.tuples(st.just(limits), members_st(limits))), st.data())
def test_a_checked_output_completes_exactly_the_valid_items_and_retries_within_caps(
    limits_and_members: tuple[Limits, list[PostRecord]], data: st.DataObject
) -> None:
    limits, members = limits_and_members
    verdicts = {p.post_id: data.draw(verdict_st) for p in members}
    check = OutputCheck(
        valid={pid: analysis(pid) for pid, v in verdicts.items() if v == "valid"},
        invalid={
            pid: "invalid item: category: bad" for pid, v in verdicts.items() if v == "invalid"
        },
    )
    decision = after_output(batch_of(members), members, check, limits)
    assert decision.batch_to is BatchStatus.COMPLETED
    assert sorted(m.post_id for m in decision.moves) == sorted(verdicts)
    for move in decision.moves:
        assert (move.to is PostStatus.COMPLETED) == (verdicts[move.post_id] == "valid")
        assert move.to in (PostStatus.COMPLETED, PostStatus.PENDING, PostStatus.FAILED)
        assert not move.refund
    assert_within_caps(decision, members, limits)


@QUICK
@given(limits_st.flatmap(lambda limits: st.tuples(st.just(limits), members_st(limits))))
def test_an_unusable_output_splits_each_post_at_most_once_and_within_its_cap(
    limits_and_members: tuple[Limits, list[PostRecord]],
) -> None:
    limits, members = limits_and_members
    decision = after_output(batch_of(members), members, OutputCheck(unusable="garbage"), limits)
    assert decision.batch_to is BatchStatus.FAILED
    in_halves = [pid for half in decision.halves for pid in half]
    moved = [m.post_id for m in decision.moves]
    assert sorted(in_halves + moved) == sorted(p.post_id for p in members)
    by_id = {p.post_id: p for p in members}
    assert all(not by_id[pid].split for pid in in_halves)  # R12: once per post
    assert in_halves == [p.post_id for p in members if p.post_id in set(in_halves)]  # order kept
    if decision.halves:
        first, second = decision.halves
        assert first and second and abs(len(first) - len(second)) <= 1
    assert all(m.to is PostStatus.FAILED for m in decision.moves)
    assert_within_caps(decision, members, limits)
    fresh = [p for p in members if not p.split and p.attempts < attempt_cap(p, limits)]
    assert (len(in_halves) == len(fresh)) if len(fresh) > 1 else in_halves == []
