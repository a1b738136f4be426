"""The io-notify lane as users share it: a default per-user cap (one user's
slow endpoints cannot hold every io thread), and one user's bad plan never
stops another user's notifications (the reconcilers submit every row)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

import dispatcher
from notify import services, signing
from notify.models import Endpoint
from project.lanes import Lane
from tests.uploads.test_plans import create_unchecked, store_unchecked
from uploads.models import Job

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_io_worker")]
NAN = float("nan")


def test_one_user_gets_at_most_the_default_io_cap_in_flight(make_user, settings, redis_client):
    settings.NOTIFY_USER_CAP = 3
    alice = make_user("alice")
    for seq in range(10):
        services.delivery_enqueue(delivery_id=f"d{seq}", seq=0, owner_id=alice.pk)
    key = dispatcher.scheduler(Lane.IO_NOTIFY).snapshot()["keys"][str(alice.pk)]
    assert (key["in_flight"], key["backlog"]) == (3, 7)


def test_a_reconciler_pass_with_one_bad_plan_still_submits_the_other_users_rows(make_user, make_batch, settings,
                                                                                  redis_client):
    good, bad = make_user("good"), make_user("bad")
    # Raised on every enqueue of its owner before plans were checked where used.
    store_unchecked(bad, notify_rate_per_s=5.0, notify_burst=0)
    [good_job], [bad_job] = make_batch(good, ["succeeded"]), make_batch(bad, ["succeeded"])
    long_ago = timezone.now() - timedelta(minutes=5)
    Job.objects.filter(id__in=[good_job.id, bad_job.id]).update(notify_pending=True, finished_at=long_ago)
    assert services.job_notifications_reconcile() == 2
    sched = dispatcher.scheduler(Lane.IO_NOTIFY)
    for job in (good_job, bad_job):
        assert sched.known(f"notify-job-{job.id}-succeeded") is not None


@pytest.mark.parametrize(("field", "value"), [("rate_per_s", 0.0), ("rate_per_s", -1.0), ("rate_per_s", NAN),
                                              ("rate_per_s", 1e9), ("burst", 0), ("burst", 10**6)])
def test_an_endpoints_bad_rate_limit_is_refused_where_it_is_edited(field, value, make_user):
    endpoint = Endpoint(owner=make_user("alice"), url="https://hooks.example/", events=["job.failed"],
                        secret=signing.secret_generate(), **{field: value})
    with pytest.raises(ValidationError) as refused:
        endpoint.full_clean()
    assert list(refused.value.error_dict) == [field]


def test_an_endpoint_with_a_stored_bad_rate_limit_gets_the_default_one(make_user, receiver, fast_retries,
                                                                          redis_client):
    """A rate of 0 used to mean "no limit" without a word."""
    fast_retries.NOTIFY_WEBHOOK_RATE_PER_S, fast_retries.NOTIFY_WEBHOOK_BURST = 1.0, 1
    alice = make_user("alice")
    endpoint = create_unchecked(Endpoint, owner=alice, url=receiver.url, events=["job.failed"], secret=signing.secret_generate(),
                                rate_per_s=0.0, burst=0)
    outcomes = []
    for key in ("a", "b"):
        event = services.event_publish(owner=alice, event_type="job.failed", key=key, data={"job": {"id": key}})
        delivery = event.deliveries.get(endpoint=endpoint)
        outcomes.append(services.delivery_attempt(delivery_id=str(delivery.id), seq=delivery.seq))
    assert outcomes == ["succeeded", "throttled"]
