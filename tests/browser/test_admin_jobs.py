"""A staff member finds failed jobs in the admin, retries one through the
confirmation page, and watches it succeed."""
from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.media import make_video
from uploads.models import Job, Output

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

RETRY = "Retry selected jobs"


@pytest.fixture
def failed_job(workers, make_user, api_client_for, wait_terminal, tmp_path) -> Job:
    """A good video, uploaded and transcoded, then marked failed with its
    outputs gone: retrying it must really run it again and succeed."""
    frank = make_user("frank")
    client = api_client_for(frank)
    with open(make_video(tmp_path / "holiday.mp4", seconds=1), "rb") as fh:
        resp = client.post("/api/uploads/", {"file": [fh]}, format="multipart")
    assert resp.status_code == 202, resp.content
    [upload] = resp.json()["uploads"]
    assert wait_terminal(client, upload["job"]["url"])["status"] == "succeeded"

    job_id = upload["job"]["id"]
    for output in Output.objects.filter(job_id=job_id):
        output.file.delete(save=False)
        output.delete()
    Job.objects.filter(id=job_id).update(status="failed", error_code="x", error_message="y")
    return Job.objects.get(id=job_id)


def status_cell(page: Page, job: Job):
    return page.locator("#result_list tbody tr", has=page.locator(f"input.action-select[value='{job.id}']")) \
        .locator("td.field-state")


def test_staff_filters_failed_jobs_retries_one_and_sees_it_succeed(
    failed_job, make_person, page, admin_login, reload_until, screenshot
):
    olga = make_person("olga", staff=True, perms=("uploads.view_job", "uploads.retry_job"))
    admin_login(page, olga)
    page.get_by_role("link", name="Jobs", exact=True).click()
    expect(page.locator("#result_list")).to_be_visible()
    # Fold the app sidebar away (remembered for this browser profile), so
    # every column of the job list fits on the screenshots.
    page.click("#toggle-nav-sidebar")
    expect(page.locator("#nav-sidebar")).to_be_hidden()

    page.locator("#changelist-filter details[data-filter-title='status']").get_by_role("link", name="Failed").click()
    expect(page).to_have_url("/admin/uploads/job/?status__exact=failed")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(status_cell(page, failed_job)).to_have_text("Failed")
    screenshot(page, "admin-jobs-failed")

    page.locator(f"input.action-select[value='{failed_job.id}']").check()
    actions = page.locator("select[name=action] option").all_inner_texts()
    assert RETRY in actions, f"no {RETRY!r} admin action yet; the Job changelist offers {actions}"
    page.select_option("select[name=action]", label=RETRY)
    page.locator("button[name=index]").click()

    # The confirmation page says how many jobs and whose before anything runs.
    expect(page.locator("#content")).to_contain_text("1 job")
    expect(page.locator("#content")).to_contain_text("frank")
    screenshot(page, "admin-jobs-retry-confirm")
    page.locator("button[name=confirm][value=yes]").click()

    expect(page.locator("ul.messagelist")).to_contain_text("Retried 1 job")
    page.locator("#changelist-filter details[data-filter-title='status']").get_by_role("link", name="All").click()
    reload_until(page, lambda: status_cell(page, failed_job).inner_text().strip() == "Succeeded",
                 timeout_s=90, what=f"job {failed_job.id} succeeded after the retry")
    screenshot(page, "admin-jobs-retried")

    job = Job.objects.get(id=failed_job.id)
    assert (job.status, job.attempts, job.error_code) == ("succeeded", 2, "")
    assert job.outputs.filter(name="mp4").exists()
