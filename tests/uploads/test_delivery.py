"""Signed output links, on both storage backends: a bundle's files are
reachable, nothing else is. With object storage a link redirects to a
presigned URL that the store itself (SeaweedFS, which checks signatures
and expiry) answers, and playlists come back with every URI signed."""
from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.core import signing
from django.urls import resolve

import media
from uploads.delivery import output_url
from uploads.models import Job, Output, Upload

pytestmark = pytest.mark.django_db

MASTER = ('#EXTM3U\n#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="aud",NAME="a",URI="audio/index.m3u8"\n'
          '#EXT-X-STREAM-INF:BANDWIDTH=1000,AUDIO="aud"\n240p/index.m3u8\n'
          '#EXT-X-STREAM-INF:BANDWIDTH=2000,AUDIO="aud"\n360p/index.m3u8\n')
VARIANT = "#EXTM3U\n#EXT-X-TARGETDURATION:4\n#EXTINF:4,\nseg_000.ts\n#EXTINF:4,\nseg_001.ts\n#EXT-X-ENDLIST\n"


def fetch(url: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, resp.read(), resp.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), ""


@pytest.fixture
def backend(storage_backend) -> str:
    return storage_backend


@pytest.fixture
def outputs(make_user, backend, tmp_path):
    owner = make_user("viewer")
    upload = Upload.objects.create(owner=owner, batch=uuid.uuid4(), filename="a.mp4", file="x", size=1)
    job = Job.objects.create(upload=upload, owner=owner, lane="cpu-transcode", status="succeeded")
    local = tmp_path / "made"
    for rendition in ("240p", "360p", "audio"):
        (local / "hls" / rendition).mkdir(parents=True)
        (local / "hls" / rendition / "index.m3u8").write_text(VARIANT)
        for n in range(2):
            (local / "hls" / rendition / f"seg_00{n}.ts").write_bytes(b"G" * 188 * (n + 1))
    (local / "hls" / "master.m3u8").write_text(MASTER)
    (local / "video.mp4").write_bytes(b"mp4")
    prefix = media.outputs_prefix(job_id=str(job.id), attempt=1)
    media.put_tree(local, prefix)
    hls = Output.objects.create(job=job, name="hls", file=f"{prefix}hls/master.m3u8",
                                content_type="application/vnd.apple.mpegurl", size=1, metadata={"duration_s": 8})
    mp4 = Output.objects.create(job=job, name="mp4", file=f"{prefix}video.mp4", content_type="video/mp4", size=3)
    return hls, mp4


def get(client, url: str, backend: str):
    """What a browser ends up with: the web's answer, or (object storage)
    the store's answer to the presigned URL the web redirected to."""
    resp = client.get(url)
    if backend == "s3" and resp.status_code == 302:
        return fetch(resp["Location"])
    if resp.status_code != 200:
        return resp.status_code, b"", ""
    body = b"".join(resp.streaming_content) if resp.streaming else resp.content
    return resp.status_code, body, resp["Content-Type"]


def test_an_hls_link_serves_every_file_of_its_bundle_with_its_type(client, outputs, backend):
    hls, _ = outputs
    master = output_url(hls)
    base = master.rsplit("/", 1)[0]
    status, _, content_type = get(client, master, backend)
    assert status == 200 and content_type == "application/vnd.apple.mpegurl"
    assert get(client, f"{base}/240p/index.m3u8", backend)[0] == 200
    status, body, content_type = get(client, f"{base}/240p/seg_000.ts", backend)
    assert status == 200 and content_type == "video/mp2t" and body == b"G" * 188


@pytest.mark.parametrize("escape", ["../video.mp4", "../../", "%2e%2e/video.mp4", "240p/../../video.mp4",
                                    "240p/missing.ts"])
def test_an_hls_link_cannot_reach_outside_its_bundle(client, outputs, escape):
    hls, _ = outputs
    base = output_url(hls).rsplit("/", 1)[0]
    assert client.get(f"{base}/{escape}").status_code == 404


def test_a_single_file_link_serves_only_that_file(client, outputs, backend):
    hls, mp4 = outputs
    url = output_url(mp4)
    assert get(client, url, backend)[:2] == (200, b"mp4")
    assert client.get(url.rsplit("/", 1)[0] + "/hls/master.m3u8").status_code == 404


def test_an_expired_or_forged_link_is_not_found(client, outputs, settings):
    _, mp4 = outputs
    url = output_url(mp4)
    token = url.split("/")[2]
    assert client.get(url.replace(token, token[:-2] + ("AA" if token[-2:] != "AA" else "BB"))).status_code == 404
    settings.FAIRLANE_URL_MAX_AGE_S = -1
    assert client.get(url).status_code == 404


def test_another_users_job_and_its_page_are_not_found(client, outputs, make_user, api_client_for):
    hls, _ = outputs
    stranger = make_user("stranger")
    assert api_client_for(stranger).get(f"/api/jobs/{hls.job_id}/").status_code == 404
    client.force_login(stranger)
    assert client.get(f"/jobs/{hls.job_id}/").status_code == 404


# --- object storage only --------------------------------------------------------


@pytest.fixture
def s3_outputs(outputs, backend):
    if backend != "s3":
        pytest.skip("object storage only")
    return outputs


def test_a_presigned_url_is_refused_by_the_store_once_tampered_with_or_expired(client, s3_outputs, settings):
    hls, mp4 = s3_outputs
    # Long enough that a loaded machine cannot let it expire before we look.
    settings.FAIRLANE_URL_MAX_AGE_S = 600
    location = client.get(output_url(mp4))["Location"]
    assert location.startswith(settings.STORAGES["public"]["OPTIONS"]["endpoint_url"])
    assert "X-Amz-Signature=" in location and "X-Amz-Expires=600" in location
    assert fetch(location)[0] == 200
    other_key = hls.file.name.rsplit("/", 1)[0] + "/240p/seg_000.ts"
    assert fetch(location.replace(mp4.file.name, other_key))[0] == 403  # another object, same signature
    signature = location.rsplit("X-Amz-Signature=", 1)[1][:64]
    assert fetch(location.replace(signature, signature[::-1]))[0] == 403
    # Expiry: the store's clock decides, from the signing time the URL carries.
    # (the link's own expiry is the test above; here the store's, signed
    # as delivery signs, for 1 s)
    short = media.presigned_url(mp4.file.name, expires_s=1, content_type="video/mp4")
    assert "X-Amz-Expires=1" in short and fetch(location)[0] == 200
    time.sleep(2.5)  # waiting longer is only later: the answer cannot change back
    assert fetch(short)[0] == 403


def test_playlists_are_rewritten_so_every_uri_is_signed(client, s3_outputs, settings):
    hls, _ = s3_outputs
    master_resp = client.get(output_url(hls))
    assert master_resp.status_code == 200 and master_resp["Cache-Control"] == "private, no-store"
    master = master_resp.content.decode()
    playlists = [line for line in master.splitlines() if line and not line.startswith("#")]
    playlists += [part.split('"')[1] for part in master.split("URI=")[1:]]
    # Renditions and the audio group: back through this output's signed link.
    assert sorted(Path(u).parent.name for u in playlists) == ["240p", "360p", "audio"]
    # Links signed for this output (a link's token carries the second it was
    # signed in, so the master's cannot be compared with one made here).
    for uri in playlists:
        match = resolve(urlsplit(uri).path)
        assert uri.startswith("http://testserver/") and match.url_name == "output-download"
        assert signing.loads(match.kwargs["token"], salt="fairlane.output") == hls.pk
    for uri in playlists:
        variant = client.get(uri.removeprefix("http://testserver"))
        assert variant.status_code == 200
        segments = [line for line in variant.content.decode().splitlines() if line and not line.startswith("#")]
        assert len(segments) == 2 and all("X-Amz-Signature=" in s for s in segments)
        for n, segment in enumerate(segments):
            status, body, content_type = fetch(segment)
            assert (status, body, content_type) == (200, b"G" * 188 * (n + 1), "video/mp2t")
