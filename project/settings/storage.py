"""Media storage (media/: the one module that knows where files live):
the filesystem or an S3-compatible store, a worker's scratch and input
cache, and the origins allowed to upload straight into the bucket."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from project.settings.core import FAIRLANE_BASE_URL
from project.settings.environ import PRODUCTION, VAR_DIR, env, env_list, environ

# Uploads and outputs go through Django's STORAGES and nothing else.
# "filesystem" (the zero-setup default): FileSystemStorage under MEDIA_ROOT,
# for one host (or a shared mount). "s3": an S3-compatible object store
# (django-storages + boto3), so web and worker hosts share nothing but it.
FAIRLANE_STORAGE = env("FAIRLANE_STORAGE", "filesystem")
MEDIA_ROOT = Path(env("FAIRLANE_MEDIA_ROOT", str(VAR_DIR / "media")))
# Uploads and outputs are never served from MEDIA_URL: only through signed,
# expiring links (uploads/delivery.py). MEDIA_URL exists for Django's checks.
MEDIA_URL = "/unused-media/"
# A worker's private copies (inputs, ffmpeg's outputs, export parts), one
# folder per attempt; never under MEDIA_ROOT, swept at worker start.
FAIRLANE_SCRATCH_DIR = Path(env("FAIRLANE_SCRATCH_DIR", str(VAR_DIR / "scratch")))
# Inputs fetched from object storage, kept on the worker host for the other
# parts of a chunked video (media/input_cache.py); 0 turns the cache off.
FAIRLANE_INPUT_CACHE_BYTES = int(env("FAIRLANE_INPUT_CACHE_BYTES", str(4 * 1024**3)))
# An MP4/QuickTime upload from this size on is read while it is fetched
# into that cache (transcoding/streamed.py): a long video's first chunk
# starts after its first megabytes, not after the whole file.
FAIRLANE_STREAM_INPUT_BYTES = int(env("FAIRLANE_STREAM_INPUT_BYTES", str(64 * 1024**2)))
# Files stream to a temporary file (never memory) past this size.
FILE_UPLOAD_MAX_MEMORY_SIZE = 2 * 1024 * 1024
# Direct uploads (uploads/direct.py): clients send parts straight to
# storage (presigned URLs; on disk, the web's /store/incoming/), so a web
# host keeps nothing of an upload. Every part but the last is this long
# (S3's minimum is 5 MiB; 10,000 parts at most: 16 MiB parts take files up
# to 156 GiB, and a 2 GiB file is 128 URLs).
FAIRLANE_UPLOAD_PART_BYTES = int(env("FAIRLANE_UPLOAD_PART_BYTES", str(16 * 1024**2)))
_STATICFILES = ("whitenoise.storage.CompressedManifestStaticFilesStorage" if PRODUCTION
                else "django.contrib.staticfiles.storage.StaticFilesStorage")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": _STATICFILES},
}


def s3_storages(env: Mapping[str, str]) -> dict:
    """STORAGES' "default" and "public" for FAIRLANE_STORAGE=s3, from `env`
    (the environment; the tests pass their own SeaweedFS's). Every host
    reaches the store at FAIRLANE_S3_ENDPOINT; browsers and players reach it
    at FAIRLANE_S3_PUBLIC_ENDPOINT (default: the same). Presigned URLs are
    signed for the public name by the "public" storage, whose endpoint is
    that name: SigV4 signs the Host header, so a signed URL's host cannot
    be rewritten afterwards."""
    from botocore.config import Config

    endpoint = env.get("FAIRLANE_S3_ENDPOINT", "")
    if not endpoint:
        raise ImproperlyConfigured("FAIRLANE_STORAGE=s3 needs FAIRLANE_S3_ENDPOINT (e.g. http://s3.internal:8333)")
    options = {
        "bucket_name": env.get("FAIRLANE_S3_BUCKET", "fairlane-media"),
        "region_name": env.get("FAIRLANE_S3_REGION", "us-east-1"),
        # Unset: boto3's own chain (AWS_* variables, instance or pod roles).
        "access_key": env.get("FAIRLANE_S3_ACCESS_KEY_ID") or None,
        "secret_key": env.get("FAIRLANE_S3_SECRET_ACCESS_KEY") or None,
        # botocore's client settings (django-storages ignores its own
        # signature_version/addressing_style options when this is given):
        "client_config": Config(
            # Without it this boto3 signs presigned URLs with SigV2.
            signature_version="s3v4",
            # Bucket in the path: one host name for every bucket (no wildcard
            # DNS for bucket.host names inside a private network).
            s3={"addressing_style": "path"},
            # A store that restarts or sheds load (connection refused, 503
            # SlowDown) is retried with backoff inside each call, about 8 s in
            # all; longer outages fail the attempt as transient
            # (media.StorageUnavailable), and the job is tried again later.
            retries={"mode": "standard", "max_attempts": 6},
            connect_timeout=5, read_timeout=60,
        ),
        # Reads through storage.open() spool to disk past 8 MiB (the default,
        # 0, keeps a whole object in memory).
        "max_memory_size": 8 * 1024 * 1024,
        # Keys are generated (uuid4, attempt numbers) and never reused, so
        # nothing depends on this; False would add a racy HEAD per save.
        "file_overwrite": True,
    }
    backend = "storages.backends.s3.S3Storage"
    return {"default": {"BACKEND": backend, "OPTIONS": {**options, "endpoint_url": endpoint}},
            "public": {"BACKEND": backend, "OPTIONS": {
                **options, "endpoint_url": env.get("FAIRLANE_S3_PUBLIC_ENDPOINT") or endpoint}}}


if FAIRLANE_STORAGE == "s3":
    STORAGES.update(s3_storages(environ()))
elif FAIRLANE_STORAGE != "filesystem":
    raise ImproperlyConfigured("FAIRLANE_STORAGE is 'filesystem' (the default) or 's3'")


def _site_origins(base_url: str) -> str:
    """The site's origin, and on loopback the same port by its other name
    (a person opens localhost:8000 or 127.0.0.1:8000)."""
    from urllib.parse import urlsplit

    url = urlsplit(base_url)
    origins = [f"{url.scheme}://{url.netloc}"]
    if url.hostname in ("127.0.0.1", "localhost"):
        other = "localhost" if url.hostname == "127.0.0.1" else "127.0.0.1"
        origins.append(f"{url.scheme}://{other}" + (f":{url.port}" if url.port else ""))
    return ",".join(origins)


# The origins whose pages upload straight into the bucket: the S3 CORS rule
# `manage.py storage_setup` writes (make run runs it; a deploy runs it as it
# runs migrate). The site's own by default.
FAIRLANE_UPLOAD_CORS_ORIGINS = env_list("FAIRLANE_UPLOAD_CORS_ORIGINS", _site_origins(FAIRLANE_BASE_URL))
