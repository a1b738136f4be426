"""A staff member logs into the admin and reads the fair dispatcher's page:
each user with work on a lane, and how much of it is still held."""
from __future__ import annotations

import pytest
import redis
from django.conf import settings
from playwright.sync_api import expect

import dispatcher
from project.lanes import Lane

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
        for setting in ("rate", "bucket"):
            fair_redis.hdel(f"{sched.prefix}{setting}", str(user.id))


def test_the_fairness_page_shows_each_users_backlog(held_jobs, make_person, page, admin_login, screenshot):
    admin_login(page, make_person("olga", staff=True))
    page.goto("/admin/fairness/")

    lane = page.locator("h2", has_text="cpu-transcode")
    expect(lane).to_be_visible()
    table = lane.locator("xpath=following-sibling::table[1]")
    headers = [h.strip().lower() for h in table.locator("thead th").all_inner_texts()]
    backlog = headers.index("backlog")
    for username, held in (("dora", "5"), ("eli", "3")):
        row = table.locator("tbody tr", has=page.locator("td", has_text=username))
        expect(row).to_have_count(1)
        expect(row.locator("td").nth(backlog)).to_have_text(held)
    screenshot(page, "fairness-page")
