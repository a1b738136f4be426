"""A job's page (uploads/pages.py) for every set of outputs a pipeline
produces: each renders, and shows the largest still there is. The browser
test (tests/browser/test_job_page.py) looks at the same pages with real
outputs; this one needs no workers."""
from __future__ import annotations

import re
import uuid

import pytest

from uploads.models import Job, Output, Upload

pytestmark = pytest.mark.django_db

IMAGE_VARIANTS = ("large", "large_jpeg", "medium", "medium_jpeg", "thumbnail", "thumbnail_jpeg")
# kind -> the outputs its pipeline produces (transcoding/pipelines.py, images.py).
KINDS = {
    "video": ("hls", "mp4", "poster"),
    "image": IMAGE_VARIANTS,
    "animated image": ("mp4", "poster"),
    "audio": ("m4a", "waveform"),
    "pdf": ("thumbnail",),
}
FILES = {"hls": "hls/master.m3u8", "mp4": "video.mp4", "poster": "poster.jpg", "m4a": "audio.m4a",
         "waveform": "waveform.png"}


def job_with(owner, kind: str, names: tuple[str, ...], status: str = Job.Status.SUCCEEDED, **fields) -> Job:
    upload = Upload.objects.create(owner=owner, batch=uuid.uuid4(), filename=f"a {kind}", file="x", size=1)
    job = Job.objects.create(upload=upload, owner=owner, lane="cpu-transcode", status=status,
                             kind=kind.split()[-1], **fields)
    for name in names:
        file = FILES.get(name) or (f"{name.removesuffix('_jpeg')}.jpg" if name.endswith("_jpeg") else f"{name}.webp")
        Output.objects.create(job=job, name=name, file=f"outputs/{job.id}/{file}", content_type="x", size=1,
                              metadata={"width": 640, "height": 360})
    return job


def picture(html: str) -> tuple[str | None, str | None]:
    """(the WebP source's file, the img's file) of the page's picture."""
    source = re.search(r'<source srcset="[^"]*/([^"/]+)" type="image/webp">', html)
    img = re.search(r'<img id="image" src="[^"]*/([^"/]+)"', html)
    return (source and source.group(1), img and img.group(1))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_job_page_of_every_kind_renders(kind, make_user, client):
    owner = make_user("ida")
    client.force_login(owner)
    resp = client.get(f"/jobs/{job_with(owner, kind, KINDS[kind]).id}/")
    assert resp.status_code == 200
    html = resp.content.decode()
    assert f"<h2>a {kind}</h2>" in html
    assert html.count("data-output>") == len(KINDS[kind])


@pytest.mark.parametrize(("names", "shown"), [
    (IMAGE_VARIANTS, ("large.webp", "large.jpg")),
    (IMAGE_VARIANTS[2:], ("medium.webp", "medium.jpg")),
    (("thumbnail",), (None, "thumbnail.webp")),  # a PDF: one WebP thumbnail, no JPEG (was a 500)
])
def test_the_page_shows_the_largest_still_with_a_jpeg_for_browsers_without_webp(names, shown, make_user, client):
    owner = make_user("ida")
    client.force_login(owner)
    kind = "pdf" if names == ("thumbnail",) else "image"
    assert picture(client.get(f"/jobs/{job_with(owner, kind, names).id}/").content.decode()) == shown


def test_a_failed_jobs_page_says_why(make_user, client):
    owner = make_user("ida")
    client.force_login(owner)
    job = job_with(owner, "pdf", (), status=Job.Status.FAILED, error_code="decode_failed",
                   error_message="The PDF could not be read.")
    html = client.get(f"/jobs/{job.id}/").content.decode()
    assert "decode_failed: The PDF could not be read." in html
    assert "<picture>" not in html and "Outputs" not in html  # no heading over an empty list
    # What can be done about it, as in the file list.
    assert re.findall(r'data-action="(\w+)"', html) == ["retry", "delete"]


@pytest.mark.parametrize(("status", "actions"), [("queued", ["cancel", "delete"]), ("running", ["cancel", "delete"]),
                                                 ("succeeded", ["delete"]), ("canceled", ["retry", "delete"])])
def test_the_page_offers_what_the_jobs_state_allows(status, actions, make_user, client):
    owner = make_user("ida")
    client.force_login(owner)
    html = client.get(f"/jobs/{job_with(owner, 'video', (), status=status).id}/").content.decode()
    assert re.findall(r'data-action="(\w+)"', html) == actions


def test_the_facts_panel_says_what_the_probe_found_in_human_units(make_user, client):
    owner = make_user("ida")
    client.force_login(owner)
    info = {"kind": "video", "container": "mov", "duration_s": 180.04, "width": 1440, "height": 1080,
            "sample_aspect": "4:3", "rotation": 90, "fps": 29.97, "vfr": True,
            "streams": [{"type": "video", "codec": "h264"}, {"type": "audio", "codec": "aac", "channels": 2,
                                                            "sample_rate": 48000}]}
    job = job_with(owner, "video", ("hls",), media_info=info, wait_ms=179_171, process_ms=2_400)
    Output.objects.filter(job=job, name="hls").update(metadata={"duration_s": 180.04, "renditions": [
        {"name": "240p", "width": 240, "height": 426, "kbps": 420}, {"name": "360p", "width": 360, "height": 640,
                                                                      "kbps": 1450}]})
    Upload.objects.filter(id=job.upload_id).update(size=123_456_789)
    html = client.get(f"/jobs/{job.id}/").content.decode()
    rows = dict(re.findall(r'<tr><th scope="row">([^<]+)</th><td>([^<]*)</td></tr>', html))
    assert rows == {"Kind": "video", "File size": "123.5 MB", "Duration": "3 min 0 s",
                    "Resolution": "1080×1920",  # 1440 wide at 4:3 pixels is 1920, then turned a quarter
                    "Frame rate": "29.97 fps (variable)", "Codecs": "h264 video, aac audio (2 ch, 48 kHz)",
                    "Container": "mov", "Waited": "2 min 59 s", "Processed in": "2.4 s"}
    renditions = re.findall(r"<tr><td>(\d+p)</td><td>([^<]+)</td><td class=\"nowrap\">([^<]+)</td>"
                            r"<td class=\"nowrap\">([^<]+)</td></tr>", html)
    assert renditions == [("360p", "360×640", "1,450 kbit/s", "32.6 MB"), ("240p", "240×426", "420 kbit/s", "9.5 MB")]


def test_the_api_token_page_shows_a_token_once_and_rotates_it(make_user, client):
    from rest_framework.authtoken.models import Token

    owner = make_user("ida")
    old = Token.objects.get(user=owner).key
    assert client.get("/account/api-token/").status_code == 302  # behind the login
    client.force_login(owner)
    page = client.get("/account/api-token/").content.decode()
    assert old not in page and "You have a token, created" in page and "Rotate token" in page
    made = client.post("/account/api-token/")
    new = Token.objects.get(user=owner).key
    assert new != old and new in made.content.decode() and "no-store" in made["Cache-Control"]
    assert not Token.objects.filter(key=old).exists()  # the old one stops working at once
    assert new not in client.get("/account/api-token/").content.decode()  # shown once
    api = client.__class__()
    assert api.get("/api/jobs/", HTTP_AUTHORIZATION=f"Token {new}").status_code == 200
    assert api.get("/api/jobs/", HTTP_AUTHORIZATION=f"Token {old}").status_code == 401
    Token.objects.filter(user=owner).delete()
    assert "You have no token yet." in client.get("/account/api-token/").content.decode()
    assert "Create token" in client.get("/account/api-token/").content.decode()


def test_the_favicon_is_served_to_anyone_on_every_page(client):
    resp = client.get("/favicon.ico")
    assert resp.status_code == 200 and resp["Content-Type"] == "image/x-icon"
    assert resp.content[:4] == b"\x00\x00\x01\x00" and "max-age" in resp["Cache-Control"]
    assert 'rel="icon"' in client.get("/accounts/login/").content.decode()


def test_the_batch_page_shows_the_name_and_its_rename_form(make_user, client):
    from uploads.models import Batch

    alice = make_user("alice")
    batch = Batch.objects.create(owner=alice, name="Summer")
    client.force_login(alice)
    html = client.get(f"/batches/{batch.id}/").content.decode()
    assert '<h2 id="batch-name">Summer</h2>' in html and "<title>Summer · Fairlane</title>" in html
    assert 'maxlength="200"' in html and 'id="export"' in html
