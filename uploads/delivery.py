"""Signed, expiring links to outputs. Stored objects are never reachable by
key: a link carries the output id signed with SECRET_KEY and a timestamp,
and stops working after FAIRLANE_URL_MAX_AGE_S.

An HLS output is a bundle (master playlist, variant playlists, segments)
whose playlists refer to each other by relative paths, so its link signs the
output and lets the path after the token name any object under the bundle's
prefix, never outside it. Every other output is a single object.

With FileSystemStorage the web serves the bytes. With object storage it
never does: a link answers with a redirect to a presigned URL of the store,
signed for the public endpoint. Playlists are the exception: a presigned
playlist's relative URIs would resolve against the store and arrive
unsigned, so each playlist is rewritten per request, every segment URI
becoming a presigned URL and every playlist URI (renditions, alternative
audio) this link again, whose answer is rewritten in turn.
"""
from __future__ import annotations

import posixpath
import re

from django.conf import settings
from django.core import signing
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

import media
from uploads.models import HLS_PLAYLIST, Output

_SALT = "fairlane.output"
_BUNDLE_TYPES = {".m3u8", ".ts", ".m4s", ".mp4", ".aac"}
# URI="..." attributes of playlist tags (EXT-X-MEDIA, EXT-X-MAP, EXT-X-KEY,
# EXT-X-I-FRAME-STREAM-INF, ...).
_URI_ATTRIBUTE = re.compile(r'URI="([^"]*)"')
# A presigned segment must outlive the playback that started from the
# playlist (a VOD player reads the playlist once): the link's lifetime, or
# the media's duration plus this margin when that is longer.
PLAYBACK_MARGIN_S = 15 * 60


def _token(output: Output) -> str:
    return signing.dumps(output.pk, salt=_SALT, compress=True)


def output_url(output: Output) -> str:
    return output_path_url(output, posixpath.basename(output.file.name))


def output_path_url(output: Output, path: str) -> str:
    """The link to `path` in the output: its file's name, or for an HLS
    bundle any of its files (`240p/index.m3u8`)."""
    return reverse("output-download", args=[_token(output), path])


def _resolve(output: Output, path: str) -> str:
    """The key a link may serve; Http404 otherwise."""
    main, folder = output.file.name, output.bundle_folder
    if folder is None:
        if path != posixpath.basename(main):
            raise Http404("Not part of this output.")
        return main
    key = posixpath.normpath(posixpath.join(folder, path))
    if not key.startswith(folder) or posixpath.splitext(key)[1] not in _BUNDLE_TYPES or not media.exists(key):
        raise Http404("Not part of this output.")
    return key


def _presign_lifetime(output: Output) -> int:
    duration = float((output.metadata or {}).get("duration_s") or 0)
    return int(max(settings.FAIRLANE_URL_MAX_AGE_S, duration + PLAYBACK_MARGIN_S))


def playlist_rewrite(text: str, *, playlist_key: str, bundle_root: str, link_base: str, expires_s: int) -> str:
    """Every URI in an HLS playlist made absolute for a client of object
    storage: segments (and init sections) presigned; playlists as this
    output's link (`link_base`, ending with "/", + their path in the bundle
    rooted at `bundle_root`), so they are rewritten in turn. Relative URIs
    resolve against the playlist's own key; anything outside the bundle is
    left as it is (and so unreachable)."""
    folder = posixpath.dirname(playlist_key)

    def rewrite(uri: str) -> str:
        if not uri or "://" in uri or uri.startswith("/"):
            return uri
        key = posixpath.normpath(posixpath.join(folder, uri))
        if not key.startswith(bundle_root + "/"):
            return uri
        if key.endswith(".m3u8"):
            return link_base + posixpath.relpath(key, bundle_root)
        return media.presigned_url(key, expires_s=expires_s, content_type=media.content_type_for(key))

    lines = []
    for line in text.splitlines():
        if line.startswith("#"):
            line = _URI_ATTRIBUTE.sub(lambda m: f'URI="{rewrite(m.group(1))}"', line)
        elif line.strip():
            line = rewrite(line.strip())
        lines.append(line)
    return "\n".join(lines) + "\n"


def _playlist_response(request: HttpRequest, output: Output, key: str, token: str) -> HttpResponse:
    link_base = request.build_absolute_uri(reverse("output-download", args=[token, "x"]))[:-1]
    body = playlist_rewrite(media.read_bytes(key).decode("utf-8", "replace"), playlist_key=key,
                            bundle_root=posixpath.dirname(output.file.name), link_base=link_base,
                            expires_s=_presign_lifetime(output))
    response = HttpResponse(body, content_type=HLS_PLAYLIST)
    response["Cache-Control"] = "private, no-store"  # it holds URLs that expire
    response["X-Content-Type-Options"] = "nosniff"
    return response


def output_download(request: HttpRequest, token: str, path: str) -> HttpResponse:
    try:
        output_id = signing.loads(token, salt=_SALT, max_age=settings.FAIRLANE_URL_MAX_AGE_S)
    except signing.BadSignature as exc:  # includes SignatureExpired
        raise Http404("Link invalid or expired.") from exc
    output = Output.objects.filter(pk=output_id).first()
    if output is None:
        raise Http404("Output not found.")
    key = _resolve(output, path)
    content_type = output.content_type if key == output.file.name else media.content_type_for(key)
    if media.uses_object_storage():
        if key.endswith(".m3u8"):
            return _playlist_response(request, output, key, token)
        url = media.presigned_url(key, expires_s=settings.FAIRLANE_URL_MAX_AGE_S, content_type=content_type)
        response = HttpResponseRedirect(url)
        response["Cache-Control"] = "private, no-store"  # the presigned URL expires
        return response
    response = FileResponse(media.open_file(key), content_type=content_type)
    response["Cache-Control"] = "private, max-age=300"
    response["X-Content-Type-Options"] = "nosniff"
    return response
