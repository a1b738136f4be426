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
    assert html.count("<li><a href=") == len(KINDS[kind])


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
