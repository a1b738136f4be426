"""A video, an image and a PDF uploaded together, through real workers, and
their outputs read back through the API's signed links."""
from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from tests.e2e.test_upload_slice import download, post_files, wait_terminal
from tests.media import make_video, video_facts

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def _download(client, output: dict, to: Path) -> Path:
    body, content_type = download(client, output["url"])
    assert content_type == output["content_type"]
    to.write_bytes(body)
    return to


def test_video_image_and_pdf_come_out_web_ready(workers, make_user, api_client_for, tmp_path):
    client = api_client_for(make_user("carol"))
    video = make_video(tmp_path / "clip.mov", seconds=1.5, size="640x360")
    Image.new("RGBA", (900, 600), (0, 128, 255, 200)).save(tmp_path / "photo.png")
    Image.new("RGB", (600, 800), "white").save(tmp_path / "doc.pdf", save_all=True,
                                               append_images=[Image.new("RGB", (600, 800), "gray")])
    resp = post_files(client, [video, tmp_path / "photo.png", tmp_path / "doc.pdf"])
    assert resp.status_code == 202
    jobs = {u["filename"]: wait_terminal(client, u["job"]["url"]) for u in resp.json()["uploads"]}
    assert all(j["status"] == "succeeded" for j in jobs.values()), {k: j["error"] for k, j in jobs.items()}

    video_job = jobs["clip.mov"]
    outputs = {o["name"]: o for o in video_job["outputs"]}
    assert video_job["kind"] == "video" and set(outputs) == {"hls", "mp4", "poster", "storyboard", "storyboard_vtt"}
    assert [r["name"] for r in outputs["hls"]["metadata"]["renditions"]] == ["240p", "360p"]
    # Scrub previews: a WebVTT index naming the sprite beside it (two frames of 1.5 s, one a second).
    cues = _download(client, outputs["storyboard_vtt"], tmp_path / "storyboard.vtt").read_text()
    assert cues.startswith("WEBVTT") and cues.count("storyboard.jpg#xywh=") == 2
    with Image.open(_download(client, outputs["storyboard"], tmp_path / "storyboard.jpg")) as sprite:
        assert (sprite.format, sprite.size) == ("JPEG", (320, 90))
    assert _download(client, outputs["hls"], tmp_path / "master.m3u8").read_text().startswith("#EXTM3U")
    facts = video_facts(_download(client, outputs["mp4"], tmp_path / "out.mp4"))
    assert (facts["video_codec"], facts["pix_fmt"], facts["audio_codec"], facts["display"]) == (
        "h264", "yuv420p", "aac", (640, 360))

    image_outputs = {o["name"]: o for o in jobs["photo.png"]["outputs"]}
    assert jobs["photo.png"]["kind"] == "image"
    # Three sizes in WebP; no JPEG, which would be more bytes than this flat PNG (transcoding/images.py).
    assert set(image_outputs) == {"thumbnail", "medium", "large"}
    with Image.open(_download(client, image_outputs["medium"], tmp_path / "m.webp")) as medium:
        assert medium.size == (800, 533) and medium.mode == "RGBA"

    pdf_job = jobs["doc.pdf"]
    [thumb] = pdf_job["outputs"]
    assert pdf_job["kind"] == "pdf" and thumb["metadata"]["pages"] == 2
