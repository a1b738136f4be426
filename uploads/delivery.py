"""Signed, expiring links to outputs. Files under MEDIA_ROOT are never served
by path: a link carries the output id signed with SECRET_KEY and a
timestamp, and stops working after FAIRLANE_URL_MAX_AGE_S.

An HLS output is a bundle (master playlist, variant playlists, segments)
whose playlists refer to each other by relative paths, so its link signs the
output and lets the path after the token name any file inside the bundle's
folder, never outside it. Every other output is a single file.
"""
from __future__ import annotations

import mimetypes
from pathlib import Path

from django.conf import settings
from django.core import signing
from django.http import FileResponse, Http404, HttpRequest
from django.urls import reverse

from uploads.models import Output

_SALT = "fairlane.output"
HLS_PLAYLIST = "application/vnd.apple.mpegurl"
_BUNDLE_TYPES = {
    ".m3u8": HLS_PLAYLIST,
    ".ts": "video/mp2t",
    ".m4s": "video/iso.segment",
    ".mp4": "video/mp4",
    ".aac": "audio/aac",
}


def output_url(output: Output) -> str:
    token = signing.dumps(output.pk, salt=_SALT, compress=True)
    return reverse("output-download", args=[token, Path(output.file.name).name])


def _resolve(output: Output, path: str) -> tuple[Path, str]:
    """The file a link may serve, and its content type; Http404 otherwise."""
    main = (Path(settings.MEDIA_ROOT) / output.file.name).resolve()
    if output.content_type != HLS_PLAYLIST:
        if path != main.name:
            raise Http404("Not part of this output.")
        return main, output.content_type
    root = main.parent
    target = (root / path).resolve()
    if not target.is_relative_to(root) or not target.is_file():
        raise Http404("Not part of this output.")
    content_type = _BUNDLE_TYPES.get(target.suffix) or mimetypes.guess_type(target.name)[0]
    if content_type is None:
        raise Http404("Not part of this output.")
    return target, content_type


def output_download(request: HttpRequest, token: str, path: str) -> FileResponse:
    try:
        output_id = signing.loads(token, salt=_SALT, max_age=settings.FAIRLANE_URL_MAX_AGE_S)
    except signing.BadSignature as exc:  # includes SignatureExpired
        raise Http404("Link invalid or expired.") from exc
    output = Output.objects.filter(pk=output_id).first()
    if output is None:
        raise Http404("Output not found.")
    target, content_type = _resolve(output, path)
    response = FileResponse(open(target, "rb"), content_type=content_type)
    response["Cache-Control"] = "private, max-age=300"
    response["X-Content-Type-Options"] = "nosniff"
    return response
