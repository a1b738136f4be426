"""A batch export through the API and a real worker, on the run's storage
backend (object storage in the PostgreSQL run): the ZIP is assembled in the
store and downloaded through its signed link."""
from __future__ import annotations

import io
import posixpath
import zipfile

import pytest
from PIL import Image

import media
from tests.e2e.test_upload_slice import download, post_files, wait_terminal
from tests.media import make_video
from uploads.models import Job

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_a_batch_export_holds_every_published_output(workers, make_user, api_client_for, tmp_path):
    client = api_client_for(make_user("exporter"))
    pictures = []
    for name, colour in (("red.png", "red"), ("blue.png", "blue")):
        Image.new("RGB", (64, 48), colour).save(tmp_path / name)
        pictures.append(tmp_path / name)
    uploads = post_files(client, pictures).json()["uploads"]
    jobs = [wait_terminal(client, u["job"]["url"]) for u in uploads]
    assert all(j["status"] == "succeeded" for j in jobs), [j["error"] for j in jobs]

    resp = client.post("/api/exports/", {"batch": uploads[0]["batch"]}, format="json")
    assert resp.status_code == 202, resp.content
    export = wait_terminal(client, f"/api/jobs/{resp.json()['id']}/")
    assert export["status"] == "succeeded", export["error"]
    [zip_output] = export["outputs"]
    body, content_type = download(client, zip_output["url"])
    assert content_type == "application/zip" and len(body) == zip_output["size"]
    archive = zipfile.ZipFile(io.BytesIO(body))
    assert archive.testzip() is None
    names = archive.namelist()
    assert len(names) == zip_output["metadata"]["entries"] == len(set(names))
    folders = {n.split("/", 1)[0] for n in names}
    assert {f.split("-")[0] for f in folders} == {"red.png", "blue.png"}
    # every output of each job is in, under its upload's folder
    assert sum(1 for n in names if n.startswith("red.png-")) >= len(jobs[0]["outputs"])


def stored_objects(job: Job) -> dict[str, str]:
    """Every stored object of the job's outputs, by its place in the job's
    folder of an export: a file output by its name, an HLS output's whole
    bundle (playlists and segments) under the bundle's folder."""
    found = {}
    for output in job.outputs.all():
        key = output.file.name
        if output.content_type == "application/vnd.apple.mpegurl":
            bundle = posixpath.dirname(key)
            home = posixpath.dirname(bundle) + "/"
            found.update({k.removeprefix(home): k for k in media.list_prefix(bundle + "/")})
        else:
            found[posixpath.basename(key)] = key
    return found


def test_a_batch_with_a_chunked_video_exports_every_output_of_every_file(chunking_workers, make_user,
                                                                         api_client_for, tmp_path):
    """A long video's outputs are stored under its finalizer's prefix, not
    its own: the export must still find them (it once rebuilt every path
    from the job's id, and left chunked videos out)."""
    client = api_client_for(make_user("marathon-exporter"))
    video = make_video(tmp_path / "long.mp4", seconds=16, size="640x360", rate=25)  # four chunks (CHUNKING_ENV)
    Image.new("RGB", (64, 48), "green").save(tmp_path / "still.png")
    uploads = post_files(client, [video, tmp_path / "still.png"]).json()["uploads"]
    jobs = [wait_terminal(client, u["job"]["url"], timeout=240) for u in uploads]
    assert [j["status"] for j in jobs] == ["succeeded", "succeeded"], [j["error"] for j in jobs]
    long_job = Job.objects.get(id=jobs[0]["id"])
    assert long_job.parts.filter(part="finalize", status="succeeded").exists()  # it was chunked

    resp = client.post("/api/exports/", {"batch": uploads[0]["batch"]}, format="json")
    assert resp.status_code == 202, resp.content
    export = wait_terminal(client, f"/api/jobs/{resp.json()['id']}/", timeout=120)
    assert export["status"] == "succeeded", export["error"]
    [zip_output] = export["outputs"]
    body, _ = download(client, zip_output["url"])
    archive = zipfile.ZipFile(io.BytesIO(body))
    assert archive.testzip() is None

    expected = {}
    for upload in uploads:
        job = Job.objects.get(id=upload["job"]["id"])
        folder = f"{upload['filename']}-{job.upload_id.hex[:8]}"
        expected.update({f"{folder}/{name}": key for name, key in stored_objects(job).items()})
    assert sorted(archive.namelist()) == sorted(expected)
    assert {name.split("/", 1)[0].split("-")[0] for name in expected} == {"long.mp4", "still.png"}
    assert any(name.endswith(".ts") for name in expected)  # the ladder's segments too
    for name, key in expected.items():
        assert archive.read(name) == media.read_bytes(key), name
