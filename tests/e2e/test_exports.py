"""A batch export through the API and a real worker, on the run's storage
backend (object storage in the PostgreSQL run): the ZIP is assembled in the
store and downloaded through its signed link."""
from __future__ import annotations

import io
import zipfile

import pytest
from PIL import Image

from tests.e2e.test_upload_slice import download, post_files, wait_terminal

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
