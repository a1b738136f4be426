"""Signed output links: a bundle's files are reachable, nothing else is."""
from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from django.conf import settings

from uploads.delivery import output_url
from uploads.models import Job, Output, Upload

pytestmark = pytest.mark.django_db


@pytest.fixture
def outputs(make_user):
    owner = make_user("viewer")
    upload = Upload.objects.create(owner=owner, batch=uuid.uuid4(), filename="a.mp4", file="x", size=1)
    job = Job.objects.create(upload=upload, owner=owner, lane="cpu-transcode", status="succeeded")
    root = Path(settings.MEDIA_ROOT) / "outputs" / str(job.id)
    (root / "hls" / "240p").mkdir(parents=True)
    (root / "hls" / "master.m3u8").write_text("#EXTM3U\n240p/index.m3u8\n")
    (root / "hls" / "240p" / "index.m3u8").write_text("#EXTM3U\nseg0.ts\n")
    (root / "hls" / "240p" / "seg0.ts").write_bytes(b"G" * 188)
    (root / "video.mp4").write_bytes(b"mp4")
    rel = f"outputs/{job.id}"
    hls = Output.objects.create(job=job, name="hls", file=f"{rel}/hls/master.m3u8",
                                content_type="application/vnd.apple.mpegurl", size=1)
    mp4 = Output.objects.create(job=job, name="mp4", file=f"{rel}/video.mp4", content_type="video/mp4", size=3)
    return hls, mp4


def test_an_hls_link_serves_every_file_of_its_bundle_with_its_type(client, outputs):
    hls, _ = outputs
    master = output_url(hls)
    base = master.rsplit("/", 1)[0]
    resp = client.get(master)
    assert resp.status_code == 200 and resp["Content-Type"] == "application/vnd.apple.mpegurl"
    assert client.get(f"{base}/240p/index.m3u8").status_code == 200
    segment = client.get(f"{base}/240p/seg0.ts")
    assert segment.status_code == 200 and segment["Content-Type"] == "video/mp2t"


@pytest.mark.parametrize("escape", ["../video.mp4", "../../", "%2e%2e/video.mp4", "240p/../../video.mp4"])
def test_an_hls_link_cannot_reach_outside_its_bundle(client, outputs, escape):
    hls, _ = outputs
    base = output_url(hls).rsplit("/", 1)[0]
    assert client.get(f"{base}/{escape}").status_code == 404


def test_a_single_file_link_serves_only_that_file(client, outputs):
    hls, mp4 = outputs
    url = output_url(mp4)
    assert client.get(url).status_code == 200
    assert client.get(url.rsplit("/", 1)[0] + "/hls/master.m3u8").status_code == 404


def test_an_expired_link_is_not_found(client, outputs, settings):
    _, mp4 = outputs
    url = output_url(mp4)
    settings.FAIRLANE_URL_MAX_AGE_S = -1
    assert client.get(url).status_code == 404
