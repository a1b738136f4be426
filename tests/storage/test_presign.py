"""media/presign.py makes botocore's presigned PUT URLs byte for byte (at
the same instant), for a single PUT and for an UploadPart, with and without
a session token, on a default port and another; and the store takes a body
of the signed length at such a URL and refuses any other."""
from __future__ import annotations

import datetime
import urllib.error
import urllib.request
import uuid
from unittest import mock

import boto3
import pytest
from botocore.config import Config

from media.presign import Presigner

AT = datetime.datetime(2026, 11, 26, 18, 0, 7)


def client(endpoint: str, token: str | None = None):
    return boto3.client("s3", endpoint_url=endpoint, region_name="eu-central-1", aws_access_key_id="AKIDEXAMPLE",
                        aws_secret_access_key="wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", aws_session_token=token,
                        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}))


def botocore_url(s3, operation: str, params: dict, expires_s: int) -> str:
    with mock.patch("botocore.auth.get_current_datetime", return_value=AT):
        return s3.generate_presigned_url(operation, ExpiresIn=expires_s, Params=params)


@pytest.mark.parametrize("endpoint", ["http://127.0.0.1:8333", "https://s3.example.com", "https://s3.example.com:8443"])
@pytest.mark.parametrize("token", [None, "FwoGZXIvYXdzE+/token=="])
@pytest.mark.parametrize("key", ["uploads/7/0f3a/6b1e", "uploads/7/a b/ü~(1).jpg"])
def test_the_urls_are_botocores_byte_for_byte(endpoint, token, key):
    s3 = client(endpoint, token)
    ours = Presigner.for_client(s3)
    assert ours.put_url("media", key, expires_s=3600, content_length=51200, if_none_match="*", now=AT) == \
        botocore_url(s3, "put_object", {"Bucket": "media", "Key": key, "ContentLength": 51200, "IfNoneMatch": "*"},
                     3600)
    upload_id = "Mjk0YTQ/NzEt+ZDk=="
    assert ours.put_url("media", key, expires_s=86399, content_length=5242880,
                        query=(("uploadId", upload_id), ("partNumber", "17")), now=AT) == \
        botocore_url(s3, "upload_part", {"Bucket": "media", "Key": key, "UploadId": upload_id, "PartNumber": 17,
                                         "ContentLength": 5242880}, 86399)
    # The signing key kept from the first URL signs the next day's with that day's key.
    next_day = AT + datetime.timedelta(days=1)
    with mock.patch("botocore.auth.get_current_datetime", return_value=next_day):
        expected = s3.generate_presigned_url("put_object", ExpiresIn=60, Params={
            "Bucket": "media", "Key": key, "ContentLength": 9, "IfNoneMatch": "*"})
    assert ours.put_url("media", key, expires_s=60, content_length=9, if_none_match="*", now=next_day) == expected


def test_it_declines_what_it_does_not_make():
    virtual = boto3.client("s3", endpoint_url="https://s3.example.com", region_name="us-east-1",
                           aws_access_key_id="a", aws_secret_access_key="b",
                           config=Config(signature_version="s3v4", s3={"addressing_style": "virtual"}))
    assert Presigner.for_client(virtual) is None


def put(url: str, body: bytes, headers: dict) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=body, method="PUT", headers=headers),
                                    timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_store_takes_exactly_the_signed_length_once(s3_storage):
    from media.store import _bucket, _client

    ours = Presigner.for_client(_client("public"))
    key = f"uploads/presign/{uuid.uuid4().hex}"
    url = ours.put_url(_bucket(), key, expires_s=300, content_length=5, if_none_match="*")
    assert put(url, b"123456", {"If-None-Match": "*"}) != 200
    assert put(url, b"1234", {"If-None-Match": "*"}) != 200
    assert put(url, b"12345", {}) != 200  # the header it was signed with is required
    assert put(url, b"12345", {"If-None-Match": "*"}) == 200
    assert put(url, b"54321", {"If-None-Match": "*"}) != 200  # written once, never overwritten
    assert _client().get_object(Bucket=_bucket(), Key=key)["Body"].read() == b"12345"


@pytest.mark.parametrize("upload_id", ["", "a-multipart-upload"])
def test_part_urls_are_what_botocore_would_sign(s3_storage, upload_id):
    """media.direct.part_url through the presigner: the same URL as
    botocore's for the same part, size, headers and expiry."""
    from media import direct
    from media.store import _bucket, _client

    with mock.patch("media.presign._now", return_value=AT):
        url, headers = direct.part_url("uploads/1/g/k", upload_id, 3, 51200,
                                       expires_at=datetime.datetime.now(datetime.timezone.utc)
                                       + datetime.timedelta(hours=1))
    expires_s = int(url.split("X-Amz-Expires=")[1].split("&")[0])
    if upload_id:
        params = {"Bucket": _bucket(), "Key": "uploads/1/g/k", "UploadId": upload_id, "PartNumber": 3,
                  "ContentLength": 51200}
        assert headers == {}
    else:
        params = {"Bucket": _bucket(), "Key": "uploads/1/g/k", "ContentLength": 51200, "IfNoneMatch": "*"}
        assert headers == {"If-None-Match": "*"}
    assert url == botocore_url(_client("public"), "upload_part" if upload_id else "put_object", params, expires_s)
