"""A staff member logs into the admin and reads the fair dispatcher's page:
each user with work on a lane, and how much of it is still held."""
from __future__ import annotations

import re
import uuid

import pytest
import redis
from django.conf import settings
from playwright.sync_api import expect

import dispatcher
from project.lanes import Lane
from tests.workers import worker_name_clash

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def held_jobs(make_person):
    """dora submits 6 jobs and eli 4 on cpu-transcode. A rate of one job per
    thousand seconds (burst 1) lets one job of each go and holds the rest
    while the test looks, whether this test releases or a worker's ticker does
    (then a worker runs the no-op and finishes it)."""
    sched = dispatcher.scheduler(Lane.CPU_TRANSCODE)
    submitted: list[str] = []
    users = {}
    for username, count in (("dora", 6), ("eli", 4)):
        user = users[username] = make_person(username)
        for i in range(count):
            job_id = f"browser-fairness-{username}-{i}"
            dispatcher.enqueue("bench.cpu.noop", [job_id, str(user.id)], task_id=job_id, fair_key=str(user.id),
                               policy=dispatcher.KeyPolicy(rate=(0.001, 1.0)))
            submitted.append(job_id)
    yield users
    # Held jobs leave; released ones (their no-op messages are in the queue,
    # for whichever worker comes) are finished, so their slots are free and
    # what that releases, other tests' work, goes out.
    for job_id in submitted:
        if not sched.cancel(job_id):
            sched.finish(job_id)
    # The scheduler keeps a key's rate (and token bucket) after its work is
    # gone, and nothing on cpu-transcode ever sets it again. The PostgreSQL
    # run's Redis outlives the test database, whose ids start over at 1 next
    # run: left alone, some later user would get one job per 1000 s.
    fair_redis = redis.Redis.from_url(settings.FAIR_REDIS_URL)
    for user in users.values():
        fair_redis.hdel(f"{sched.prefix}h", *(f"{field}|{user.id}" for field in ("rate", "bucket", "pol")))


def finished_jobs(users: dict) -> None:
    """Jobs that ran in the last half hour: dora's took twice eli's worker
    time; eli waited longer (the charts' history is these rows)."""
    from datetime import timedelta

    from django.utils import timezone

    from uploads.models import Job, Upload

    now = timezone.now()
    for minutes_ago in range(2, 30, 3):
        for username, process_ms, wait_ms in (("dora", 2000, 100), ("eli", 1000, 179_171)):
            user = users[username]
            upload = Upload.objects.create(owner=user, batch=uuid.uuid4(), filename="f.mp4", file="x", size=1)
            ended = now - timedelta(minutes=minutes_ago)
            Job.objects.create(upload=upload, owner=user, lane="cpu-transcode", status="succeeded",
                               started_at=ended - timedelta(milliseconds=process_ms), finished_at=ended,
                               process_ms=process_ms, wait_ms=wait_ms)


def test_the_fairness_page_shows_each_users_backlog(held_jobs, make_person, page, admin_login, screenshot):
    finished_jobs(held_jobs)
    idle = make_person("ivan")  # nothing on the lane now, work in the last minutes
    finished_jobs({"dora": idle, "eli": idle})
    admin_login(page, make_person("olga", staff=True))
    # Linked from the admin's index.
    page.click("#fair-dispatch-link a")
    expect(page).to_have_url("/admin/fairness/")

    lane = page.locator("h2", has_text="cpu-transcode")
    expect(lane).to_be_visible()
    table = lane.locator("xpath=following-sibling::table[contains(@class, 'users')][1]")
    headers = [h.strip().lower() for h in table.locator("thead th").all_inner_texts()]
    backlog = headers.index("backlog")
    for username, held in (("dora", "5"), ("eli", "3")):
        row = table.locator("tbody tr", has=page.locator("td", has_text=username))
        expect(row).to_have_count(1)
        expect(row.locator("td").nth(backlog)).to_have_text(held)
        # States in words, not the scheduler's names.
        # Which of the two a key shows depends on whether a release has
        # looked at it since its token went (a full window looks at no one);
        # the mapping itself is tested in tests/dispatcher/test_admin_page.py.
        expect(row.locator("td").nth(headers.index("state"))).to_have_text(
            re.compile(r"^(waiting for its rate limit|waiting, takes its turn)$"))
    # Waits in human units, on one line: "179171 ms" was a number to decode.
    eli = table.locator("tbody tr", has=page.locator("td", has_text="eli"))
    expect(eli.locator("td").nth(headers.index("wait p99"))).to_have_text("2 min 59 s")
    expect(table.locator("tbody tr", has=page.locator("td", has_text="dora")).locator("td").nth(
        headers.index("wait p50"))).to_have_text("100 ms")
    ivan = table.locator("tbody tr", has=page.locator("td", has_text="ivan"))
    expect(ivan.locator("td").nth(headers.index("state"))).to_have_text("idle")
    expect(ivan.locator("td").nth(headers.index("weight"))).to_have_text("1")  # the plan's, not a dash
    expect(ivan.locator("td").nth(headers.index("cap"))).to_have_text("no cap")

    # It refreshes itself: a change in the scheduler shows without a reload.
    page.evaluate("window.__notReloaded = true")
    dispatcher.scheduler(Lane.CPU_TRANSCODE).cancel("browser-fairness-dora-5")
    row = table.locator("tbody tr", has=page.locator("td", has_text="dora"))
    expect(row.locator("td").nth(backlog)).to_have_text("4", timeout=15_000)
    assert page.evaluate("window.__notReloaded") is True

    # Charts of the last hour: a series per user, from the jobs that ran.
    charts = page.locator("#lane-cpu-transcode .charts")
    expect(charts.locator(".chart-pct canvas")).to_have_count(1)
    expect(charts.locator(".chart-ms canvas")).to_have_count(1)
    for name in ("dora", "eli", "ivan"):
        expect(charts.locator(".chart-pct .u-legend")).to_contain_text(name)
        # Each alone: an organisation of one, named after them.
        expect(charts.locator(".chart-org-pct .u-legend")).to_contain_text(name)
    screenshot(page, "fairness-page")


def test_the_fairness_page_warns_of_two_workers_with_one_name(make_person, page, admin_login, screenshot):
    """The second of two live processes named alike is refused (its slots do
    not count): the page says which, above the lane's table."""
    name = "cpu@browser-clash-test"
    with worker_name_clash(name) as (_, refused):
        admin_login(page, make_person("olga", staff=True))
        page.goto("/admin/fairness/")
        warning = page.locator("#lane-cpu-transcode .worker-clash")
        expect(warning).to_have_count(1)
        expect(warning).to_contain_text(f"Two live workers are named {name}")
        expect(warning).to_contain_text(f"{refused} was refused")
        expect(page.locator("#lane-io-notify .worker-clash")).to_have_count(0)
        screenshot(page, "fairness-page-worker-clash")
