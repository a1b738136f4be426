"""Per-user limits on what users share (uploads/limits.py), held in each
user's plan: edited on the user's admin page (validated there and by the
database), empty for the settings' default, the plan's own value winning.
Jobs queued or scheduled and direct uploads in progress are counted under
the user's lock where they are created; a refusal creates nothing, leaves
what was accepted as it was, and never touches another user. (Webhook
endpoints: tests/notify/test_limits.py; API rates: test_throttling.py.)"""
from __future__ import annotations

import re
import threading
import uuid
from datetime import timedelta
from html.parser import HTMLParser

import pytest
from django.core.exceptions import ValidationError
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import IntegrityError, connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import dispatcher
import media
from project.lanes import Lane
from tests.dispatcher_state import held
from tests.promise import wait_for_lock_wait
from tests.uploads.test_direct import put
from tests.uploads.test_plans import store_unchecked
from uploads import limits, services
from uploads.models import Batch, DirectUpload, Job, Profile, Upload

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("cpu_lane_paused")]
MIB = 1024 * 1024


def plan(user, **values) -> Profile:
    return Profile.objects.update_or_create(user=user, defaults=values)[0]


@pytest.fixture
def upload(api_client_for, django_capture_on_commit_callbacks, filesystem_storage):
    """POST files through the API, scheduled for tomorrow (so the dispatcher
    holds the jobs, delayed), with the after-commit submit run; the answer."""

    def post(user, count: int):
        files = [SimpleUploadedFile(f"f{i}.mp4", b"0123456789") for i in range(count)]
        tomorrow = (timezone.now() + timedelta(days=1)).isoformat()
        with django_capture_on_commit_callbacks(execute=True):
            return api_client_for(user).post("/api/uploads/", {"file": files, "scheduled_for": tomorrow},
                                             format="multipart")

    return post


def job_ids(resp) -> list[str]:
    assert resp.status_code == 202, resp.content
    return [u["job"]["id"] for u in resp.json()["uploads"]]


def assert_refused(resp, code: str, **numbers) -> dict:
    assert resp.status_code == 429, resp.content
    error = resp.json()["error"]
    assert error["code"] == code and error["message"]
    assert {k: error[k] for k in numbers} == numbers
    return error


# --- the plan ------------------------------------------------------------------------------------------------

BAD_LIMITS = [(field, 0) for field in Profile.LIMITS] + [(field, high + 1) for field, (_, high) in
                                                        Profile.LIMITS.items()]


def test_every_limit_has_a_setting_for_its_default():
    assert set(limits.DEFAULTS) == set(Profile.LIMITS)


@pytest.mark.parametrize(("field", "value"), BAD_LIMITS)
def test_a_limit_out_of_its_bounds_is_refused_by_validation_and_by_the_database(field, value, make_user):
    user = make_user("u")
    with pytest.raises(ValidationError) as refused:
        Profile(user=user, **{field: value}).full_clean()
    assert list(refused.value.error_dict) == [field]
    with pytest.raises(IntegrityError), transaction.atomic():
        Profile.objects.create(user=user, **{field: value})


class _Form(HTMLParser):
    """What a browser would post from a page's form: every named input,
    checked box, selected option and text area, as rendered."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.data: dict[str, list[str]] = {}
        self._select: str | None = None
        self._textarea: str | None = None
        self.feed(html)

    def _add(self, name: str, value: str) -> None:
        self.data.setdefault(name, []).append(value)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "input" and a.get("name") and a.get("type") not in ("submit", "button", "file"):
            if a.get("type") not in ("checkbox", "radio") or "checked" in a:
                self._add(a["name"], a.get("value") or "")
        elif tag == "select":
            self._select = a.get("name")
        elif tag == "option" and self._select and "selected" in a:
            self._add(self._select, a.get("value") or "")
        elif tag == "textarea":
            self._textarea = a.get("name")
            self._add(self._textarea, "")

    def handle_endtag(self, tag):
        if tag == "select":
            self._select = None
        elif tag == "textarea":
            self._textarea = None

    def handle_data(self, data):
        if self._textarea:
            self.data[self._textarea][-1] += data


def test_the_users_admin_page_edits_the_limits_and_refuses_bad_ones_saying_why(admin_client, make_user):
    user = make_user("alice")
    page = f"/admin/auth/user/{user.pk}/change/"
    shown = admin_client.get(page)
    assert b"Limits (empty: the default)" in shown.content and b"Now 10,000." in shown.content
    form = _Form(shown.content.decode()).data
    assert "fair_profile-0-max_queued_jobs" in form
    bad = {**form, "fair_profile-0-max_queued_jobs": "0", "fair_profile-0-api_reads_per_min": "100001"}
    resp = admin_client.post(page, bad)
    assert resp.status_code == 200  # the page again, with its errors
    # The plan's inline (the page also has the user's organisation).
    [inline] = [i for i in resp.context["inline_admin_formsets"] if i.formset.prefix == "fair_profile"]
    errors = inline.formset.forms[0].errors
    assert "greater than or equal to 1" in errors["max_queued_jobs"][0]
    assert "less than or equal to 100000" in errors["api_reads_per_min"][0]
    assert not Profile.objects.filter(user=user).exists()
    good = {**form, "fair_profile-0-max_queued_jobs": "3", "fair_profile-0-max_pending_bytes": str(2 * MIB)}
    assert admin_client.post(page, good).status_code == 302
    saved = Profile.objects.get(user=user)
    assert (saved.max_queued_jobs, saved.max_pending_bytes, saved.api_reads_per_min) == (3, 2 * MIB, None)
    assert limits.limits_for(user_id=user.pk).queued_jobs == 3


def test_an_empty_limit_is_the_settings_default_and_the_plans_own_value_wins(make_user, settings):
    settings.FAIRLANE_MAX_QUEUED_JOBS, settings.FAIRLANE_API_WRITES_PER_MIN = 7, 11
    alice, bob = make_user("alice"), make_user("bob")
    plan(alice, max_queued_jobs=3, api_reads_per_min=5, max_pending_bytes=MIB)
    mine, theirs = limits.limits_for(user_id=alice.pk), limits.limits_for(user_id=bob.pk)
    assert (mine.queued_jobs, mine.api_per_min["read"], mine.pending_bytes) == (3, 5, MIB)
    assert (mine.api_per_min["write"], theirs.queued_jobs, theirs.api_per_min["write"]) == (11, 7, 11)
    settings.FAIRLANE_MAX_QUEUED_JOBS = 8  # a changed default reaches every plan without a value of its own
    assert limits.limits_for(user_id=bob.pk).queued_jobs == 8 and limits.limits_for(user_id=alice.pk).queued_jobs == 3


def test_a_stored_bad_limit_falls_back_to_its_default_for_that_user_only(make_user, settings, caplog):
    settings.FAIRLANE_MAX_QUEUED_JOBS = 7
    alice = make_user("alice")
    store_unchecked(alice, max_queued_jobs=0, max_webhook_endpoints=4)
    got = limits.limits_for(user_id=alice.pk)
    assert (got.queued_jobs, got.webhook_endpoints) == (7, 4)
    assert f"plan of user {alice.pk} has invalid max_queued_jobs" in caplog.text


def test_a_request_reads_its_users_plan_once_and_the_next_request_reads_it_again(
        storage_backend, make_user, api_client_for):
    """Its throttle, its first look and its check under the lock each ask for
    the plan; on a busy database host every round trip waits for the core.
    With a token, it is read in the token's own query (PlanTokenAuthentication)."""
    alice = make_user("alice")
    plan(alice, max_pending_uploads=2)
    client = api_client_for(alice)

    def plan_reads(call):
        with CaptureQueriesContext(connection) as queries:
            resp = call()
        reads = [q["sql"] for q in queries.captured_queries if '"uploads_profile"' in q["sql"]]
        assert all('FROM "authtoken_token"' in sql for sql in reads), reads  # no query of its own
        return resp, len(reads)

    created, reads = plan_reads(lambda: client.post(
        "/api/uploads/direct/", {"files": [{"filename": "a.png", "size": 3}]}, format="json"))
    assert created.status_code == 201, created.content
    assert reads == 1  # the throttle's and the room check's
    [upload] = created.json()["uploads"]
    assert put(client, upload["urls"][0], b"abc") == 200
    claimed, reads = plan_reads(lambda: client.post("/api/uploads/", {"direct": [upload["id"]]}, format="json"))
    assert claimed.status_code == 202, claimed.content
    assert reads == 1  # the throttle's, the first look's and the two checks under the lock
    plan(alice, max_pending_uploads=1)  # edited between two requests: the next one sees it
    direct = {"files": [{"filename": f"{n}.png", "size": 3} for n in "bc"]}
    refused, reads = plan_reads(lambda: client.post("/api/uploads/direct/", direct, format="json"))
    assert_refused(refused, "too_many_pending_uploads", limit=1, count=0, requested=2)
    assert reads == 1
    assert limits.limits_for(user_id=alice.pk).pending_uploads == 1  # outside a request: read each time


def test_a_token_without_a_plan_row_gets_the_defaults_and_a_bad_or_inactive_token_is_refused(
        make_user, api_client_for, settings):
    from uploads.models import Profile

    settings.FAIRLANE_MAX_PENDING_UPLOADS = 1
    bob = make_user("bob")
    Profile.objects.filter(user=bob).delete()
    client = api_client_for(bob)
    with CaptureQueriesContext(connection) as queries:
        first = client.post("/api/uploads/direct/", {"files": [{"filename": "a.png", "size": 3}]}, format="json")
    assert first.status_code == 201, first.content
    assert not [q for q in queries.captured_queries if 'FROM "uploads_profile"' in q["sql"]]
    more = client.post("/api/uploads/direct/", {"files": [{"filename": "b.png", "size": 3}]}, format="json")
    assert_refused(more, "too_many_pending_uploads", limit=1, count=1, requested=1)
    client.credentials(HTTP_AUTHORIZATION="Token nonsense")
    assert client.get("/api/batches/").status_code == 401
    bob.is_active = False
    bob.save()
    assert api_client_for(bob).get("/api/batches/").status_code == 401


# --- jobs queued or scheduled -----------------------------------------------------------------------------------


def test_an_upload_past_the_users_queued_jobs_is_refused_whole_and_what_was_accepted_stays(
        make_user, upload, settings, filesystem_storage):
    settings.FAIRLANE_MAX_QUEUED_JOBS = 2  # bob's, who has no plan of his own
    alice, bob = make_user("alice"), make_user("bob")
    plan(alice, max_queued_jobs=3)  # the plan's own wins over the default
    accepted = job_ids(upload(alice, 2))
    stored = media.list_prefix(f"uploads/{alice.pk}/")
    error = assert_refused(upload(alice, 2), "too_many_queued_jobs", limit=3, count=2, requested=2)
    assert "3" in error["message"]
    # Nothing of the refused request was created or kept; what was accepted is as it was.
    assert media.list_prefix(f"uploads/{alice.pk}/") == stored
    assert (Upload.objects.filter(owner=alice).count(), Batch.objects.filter(owner=alice).count()) == (2, 1)
    assert [Job.objects.get(id=i).status for i in accepted] == ["queued", "queued"]
    assert [held(i) for i in accepted] == ["delayed", "delayed"]
    # Another user is held to his own limit only; alice's last place is hers.
    assert len(job_ids(upload(bob, 2))) == 2
    assert_refused(upload(bob, 1), "too_many_queued_jobs", limit=2, count=2)
    assert len(job_ids(upload(alice, 1))) == 1
    # An ended job frees its place.
    Job.objects.filter(id=accepted[0]).update(status=Job.Status.SUCCEEDED)
    assert len(job_ids(upload(alice, 1))) == 1


def test_scheduled_and_running_jobs_count_ended_ones_and_parts_do_not(make_user):
    alice, bob = make_user("alice"), make_user("bob")
    upload_row = Upload.objects.create(owner=alice, batch=uuid.uuid4(), filename="a.mp4", file="x", size=1)

    def job(status, owner=alice, **fields) -> Job:
        return Job.objects.create(**{"upload": upload_row, **fields}, owner=owner, lane=Lane.CPU_TRANSCODE,
                                  status=status)

    parent = job(Job.Status.RUNNING)
    job(Job.Status.QUEUED, scheduled_for=timezone.now() + timedelta(days=365 * 70))
    job(Job.Status.QUEUED, kind=Job.Kind.EXPORT, upload=None)
    for ended in Job.TERMINAL:
        job(ended)
    job(Job.Status.QUEUED, parent=parent, part=Job.Part.CHUNK, part_index=0, upload=None)
    job(Job.Status.QUEUED, owner=bob)
    assert limits.queued_jobs_count(owner_id=alice.pk) == 3


def test_counting_a_users_jobs_reads_them_by_index_never_the_whole_table(make_user):
    """The count's cost grows with the user's own jobs, not with other users'."""
    counted = Job.objects.filter(owner_id=make_user("u").pk, status__in=Job.UNFINISHED, parent__isnull=True)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:  # a tiny table would be scanned whatever its indexes
            cursor.execute("SET LOCAL enable_seqscan = off")
        plan_text = counted.explain()
        # PostgreSQL wraps the condition in one pair of parentheses or two, by what it is ANDed with
        assert "Seq Scan" not in plan_text and re.search(r"Index Cond: \(+owner_id = ", plan_text), plan_text
    else:
        plan_text = counted.explain()
        assert "USING INDEX" in plan_text and "owner_id=?" in plan_text, plan_text


def test_a_claim_past_the_limit_creates_nothing_and_its_uploads_can_be_claimed_later(
        make_user, api_client_for, settings, filesystem_storage, django_capture_on_commit_callbacks):
    alice = make_user("alice")
    plan(alice, max_queued_jobs=2)
    client = api_client_for(alice)
    created = client.post("/api/uploads/direct/", {"files": [{"filename": f"{i}.jpg", "size": 3} for i in range(3)]},
                          format="json").json()["uploads"]
    for u in created:
        assert client.generic("PUT", u["urls"][0]["url"], b"abc", content_type="application/octet-stream",
                              **{f"HTTP_{k.upper().replace('-', '_')}": v for k, v in u["urls"][0]["headers"].items()}
                              ).status_code == 200
    ids = [u["id"] for u in created]
    assert_refused(client.post("/api/uploads/", {"direct": ids}, format="json"), "too_many_queued_jobs",
                   limit=2, count=0, requested=3)
    assert not Job.objects.exists() and DirectUpload.objects.filter(owner=alice).count() == 3
    plan(alice, max_queued_jobs=3)
    with django_capture_on_commit_callbacks(execute=True):
        assert len(job_ids(client.post("/api/uploads/", {"direct": ids}, format="json"))) == 3


def test_retrying_past_the_limit_retries_nothing(make_user, upload, api_client_for,
                                                 django_capture_on_commit_callbacks):
    alice = make_user("alice")
    plan(alice, max_queued_jobs=3)
    first = job_ids(upload(alice, 3))
    with django_capture_on_commit_callbacks(execute=True):  # out of the dispatcher, as a failure leaves them
        services.jobs_cancel(job_ids=first, actor=alice)
    Job.objects.filter(id__in=first).update(status=Job.Status.FAILED, error_code="decode_failed")
    queued = job_ids(upload(alice, 1))
    client = api_client_for(alice)
    batch = Job.objects.get(id=first[0]).upload.batch
    with django_capture_on_commit_callbacks(execute=True):
        assert_refused(client.post(f"/api/batches/{batch}/retry/"), "too_many_queued_jobs", limit=3, count=1,
                       requested=3)
    assert set(Job.objects.filter(id__in=first).values_list("status", flat=True)) == {"failed"}
    assert [held(i) for i in first] == [None] * 3 and held(queued[0]) == "delayed"
    with django_capture_on_commit_callbacks(execute=True):
        assert client.post(f"/api/jobs/{first[0]}/retry/").status_code == 202
        assert client.post(f"/api/jobs/{first[1]}/retry/").status_code == 202
        assert_refused(client.post(f"/api/jobs/{first[2]}/retry/"), "too_many_queued_jobs", limit=3, count=3)
    assert Job.objects.get(id=first[2]).status == Job.Status.FAILED


def test_an_export_past_the_limit_is_refused(make_user, upload, api_client_for):
    alice = make_user("alice")
    plan(alice, max_queued_jobs=1)
    [job] = job_ids(upload(alice, 1))
    batch = str(Job.objects.get(id=job).upload.batch)
    resp = api_client_for(alice).post("/api/exports/", {"batch": batch}, format="json")
    assert_refused(resp, "too_many_queued_jobs", limit=1, count=1, requested=1)
    assert not Job.objects.filter(kind=Job.Kind.EXPORT).exists()


def test_an_operators_retry_past_a_users_limit_says_so_and_retries_nothing(admin_client, make_user, upload):
    alice = make_user("alice")
    plan(alice, max_queued_jobs=1)
    failed = job_ids(upload(alice, 1))
    Job.objects.filter(id__in=failed).update(status=Job.Status.FAILED)
    job_ids(upload(alice, 1))
    resp = admin_client.post("/admin/uploads/job/", {"action": "retry_jobs", "_selected_action": failed,
                                                     "confirm": "yes"}, follow=True)
    assert resp.status_code == 200
    assert "Nothing was retried: At most 1 of your jobs" in resp.content.decode()
    assert Job.objects.get(id=failed[0]).status == Job.Status.FAILED


@pytest.mark.django_db(transaction=True)
def test_two_requests_at_once_cannot_both_squeeze_under_the_limit(make_user, monkeypatch):
    """The first request holds its transaction open after counting, until the
    second is seen waiting on the user's lock; then the second counts the
    first's jobs and is refused. PostgreSQL only: SQLite serializes writers
    at BEGIN IMMEDIATE, so there the second waits before it even counts."""
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL's row locks to see the second request wait")
    alice = make_user("alice")
    plan(alice, max_queued_jobs=3)
    counted, go = threading.Event(), threading.Event()
    real_check = limits.queued_jobs_check

    def held_open(**kwargs):
        real_check(**kwargs)
        if threading.current_thread().name == "first":
            counted.set()
            assert go.wait(60), "the second request never waited"

    monkeypatch.setattr(limits, "queued_jobs_check", held_open)
    monkeypatch.setattr(dispatcher, "after_commit", lambda fn: None)  # nothing to submit: the lane is not the point
    outcomes: dict[str, object] = {}

    def record(name: str) -> None:
        try:
            files = [services.StoredFile(f"uploads/{alice.pk}/{name}{i}", f"{i}.jpg", 1) for i in range(2)]
            outcomes[name] = len(services.uploads_record(owner=alice, files=files))
        except Exception as exc:  # noqa: BLE001 - the outcome is the test's to judge
            outcomes[name] = exc
        finally:
            connections.close_all()

    first = threading.Thread(target=record, args=("first",), name="first")
    first.start()
    assert counted.wait(60)
    second = threading.Thread(target=record, args=("second",), name="second")
    second.start()

    wait_for_lock_wait("%FOR NO KEY UPDATE%", "the second request to wait on the user's lock", 60)
    go.set()
    first.join(60)
    second.join(60)
    assert outcomes["first"] == 2
    assert getattr(outcomes["second"], "code", None) == "too_many_queued_jobs", outcomes
    assert Job.objects.filter(owner=alice).count() == 2


# --- direct uploads in progress ---------------------------------------------------------------------------------


def test_the_plans_own_bounds_on_uploads_in_progress_win_over_the_settings(make_user, api_client_for, settings):
    settings.FAIRLANE_MAX_PENDING_UPLOADS, settings.FAIRLANE_MAX_USER_PENDING_BYTES = 1, MIB
    alice, bob = make_user("alice"), make_user("bob")
    plan(alice, max_pending_uploads=3, max_pending_bytes=10 * MIB)
    client = api_client_for(alice)

    def create(c, *sizes: int):
        return c.post("/api/uploads/direct/", {"files": [{"filename": "f", "size": s} for s in sizes]}, format="json")

    assert create(client, 4 * MIB, 4 * MIB).status_code == 201  # past the default bytes and count: her plan's
    over = create(client, 3 * MIB)
    assert over.status_code == 413 and over.json()["error"]["code"] == "too_many_pending_bytes"
    assert over.json()["error"]["limit"] == 10 * MIB and over.json()["error"]["count"] == 8 * MIB
    assert create(client, MIB).status_code == 201
    assert_refused(create(client, 1), "too_many_pending_uploads", limit=3, count=3, requested=1)
    bob_client = api_client_for(bob)
    assert create(bob_client, MIB).status_code == 201  # bob: the settings' defaults
    assert_refused(create(bob_client, 1), "too_many_pending_uploads", limit=1, count=1)
