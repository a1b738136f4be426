"""Resumable uploads over the tus protocol (https://tus.io/protocols/resumable-upload),
served by drf-tus; the page's client is tus-js-client (uploads/static).

    POST   /api/uploads/resumable/          Upload-Length, Upload-Metadata -> 201, Location
    HEAD   /api/uploads/resumable/<guid>/   -> Upload-Offset: how much arrived
    PATCH  /api/uploads/resumable/<guid>/   Upload-Offset + a chunk -> 204, the new offset
    DELETE /api/uploads/resumable/<guid>/   give it up

A dropped connection costs at most the chunk in flight: the client asks
with HEAD where the upload stands and goes on from there. A finished upload
is not a job yet: `POST /api/uploads/` with {"resumable": [guid, ...]}
turns finished uploads into one batch, through the same service (limits,
storage, jobs) as a multipart upload, and removes them here.

What is ours around drf-tus: every upload has an owner and only its owner
reaches it (404 otherwise); an upload declares its length (no deferred
length) and a chunk goes no further than it; a chunk is at most
FAIRLANE_RESUMABLE_CHUNK_BYTES and is read from the request stream (not
`request.body`, whose limit is Django's small DATA_UPLOAD_MAX_MEMORY_SIZE);
drf-tus reads headers it never checked were sent, so a chunk's are checked
before it runs (missing ones were 500s); a user has at most
FAIRLANE_MAX_RESUMABLE_UPLOADS uploads not yet made into a batch, of
FAIRLANE_MAX_USER_INFLIGHT_BYTES at most together; malformed tus headers
and every refusal answer in the API's error shape.
"""
from __future__ import annotations

import json
import logging
import os

from django.conf import settings
from django.core.files.uploadedfile import UploadedFile
from django.db import transaction
from django.db.models import Count, Sum, Value
from django.db.models.functions import Greatest
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework_tus import constants, states
from rest_framework_tus import middleware as tus_middleware
from rest_framework_tus.parsers import TusUploadStreamParser
from rest_framework_tus.storage import AbstractUploadSaveHandler
from rest_framework_tus.views import (
    TusCreateMixin,
    TusHeadMixin,
    TusPatchMixin,
    TusTerminateMixin,
    UploadMetadata,
)

from uploads.api_schema import errors
from uploads import services
from uploads.errors import ApplicationError
from uploads.models import ResumableUpload

log = logging.getLogger(__name__)


class TusMiddleware(tus_middleware.TusMiddleware):
    """drf-tus's header parsing, with a malformed number (Upload-Length: abc)
    answered as a 400 instead of drf-tus's ValueError (a 500)."""

    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        try:
            return super().process_request(request)
        except (ValueError, TypeError):
            return JsonResponse({"error": {"code": "invalid_tus_header",
                                           "message": "A tus header has a malformed value."}}, status=400)


class KeepUntilClaimed(AbstractUploadSaveHandler):
    """The finished file stays where its chunks were written until
    `resumable_files_claim` turns it into a job (settings.REST_FRAMEWORK_TUS)."""

    def handle_save(self) -> None:
        self.finish()


class TusOptions(UploadMetadata):
    """drf-tus's answer to OPTIONS, without the creation-defer-length
    extension: an upload must declare its length (perform_create)."""

    def determine_metadata(self, request: Request, view) -> dict:
        answer = super().determine_metadata(request, view)
        answer["Tus-Extension"] = ",".join(name for name in answer["Tus-Extension"].split(",")
                                           if name != "creation-defer-length")
        return answer


class ResumableUploadSerializer(serializers.ModelSerializer):
    """What drf-tus validates on creation (from the tus headers) and the
    schema shows; never where the chunks are kept."""

    class Meta:
        model = ResumableUpload
        fields = ["guid", "upload_length", "upload_offset", "upload_metadata", "filename", "state", "expires"]
        read_only_fields = ["guid", "upload_offset", "state", "expires"]


TUS_HEADERS = [
    OpenApiParameter("Tus-Resumable", str, OpenApiParameter.HEADER, required=True, description="`1.0.0`"),
]


class _Tus:
    """What the tus views share: the owner's uploads only, drf-tus's string
    refusals in the API's error shape."""

    serializer_class = ResumableUploadSerializer
    parser_classes = [TusUploadStreamParser]
    metadata_class = TusOptions
    lookup_field = "guid"
    lookup_url_kwarg = "guid"

    def get_queryset(self):
        return ResumableUpload.objects.filter(user=self.request.user)

    def finalize_response(self, request, response, *args, **kwargs):
        if response.status_code >= 400 and isinstance(response.data, str):
            response.data = {"error": {"code": "tus_refused", "message": response.data}}
        return super().finalize_response(request, response, *args, **kwargs)


class ResumableCreateApi(_Tus, TusCreateMixin, GenericAPIView):
    @property
    def max_file_size(self) -> int:  # drf-tus reads its own setting once, at import
        return settings.FAIRLANE_MAX_UPLOAD_BYTES

    @extend_schema(
        operation_id="uploads_resumable_create", request=None,
        responses={201: None, **errors(400, 413, _400="A tus header is missing or malformed; no `Upload-Length` "
                                       "(`upload_length_required`: deferred lengths are not supported).")},
        parameters=[*TUS_HEADERS,
                    OpenApiParameter("Upload-Length", int, OpenApiParameter.HEADER, required=True,
                                     description="The file's size in bytes (at most FAIRLANE_MAX_UPLOAD_BYTES)."),
                    OpenApiParameter("Upload-Metadata", str, OpenApiParameter.HEADER,
                                     description="tus metadata: `filename <base64>,filetype <base64>`.")],
        description="Start a resumable upload (tus creation). The answer's `Location` header is the "
                    "upload's URL, for PATCH (chunks of at most FAIRLANE_RESUMABLE_CHUNK_BYTES) and HEAD. "
                    "429: too many unfinished resumable uploads.")
    def post(self, request: Request) -> Response:
        return self.create(request)

    def perform_create(self, serializer) -> None:
        for expired in ResumableUpload.objects.filter(user=self.request.user, expires__lt=timezone.now()):
            expired.delete()  # with its chunks (drf-tus)
        # What a user may keep on the web host's disk before it becomes jobs:
        # a count (a 2,000-file batch fits) and bytes (as for requests in flight).
        held = ResumableUpload.objects.filter(user=self.request.user).aggregate(
            count=Count("id"), size=Sum(Greatest("upload_length", Value(0))))
        limit = settings.FAIRLANE_MAX_RESUMABLE_UPLOADS
        if held["count"] >= limit:
            raise ApplicationError("too_many_resumable_uploads", f"At most {limit} resumable uploads not yet made "
                                   "into a batch at once; finish or delete some first.", status_code=429)
        size = serializer.validated_data.get("upload_length", -1)
        if size <= 0:
            # drf-tus takes Upload-Defer-Length but never a length later, so
            # such an upload could not finish; and its bytes could not be
            # counted against the limits meanwhile.
            raise ApplicationError("upload_length_required", "Send the file's size in Upload-Length (more than 0); "
                                   "deferred lengths (Upload-Defer-Length) are not supported.")
        budget = settings.FAIRLANE_MAX_USER_INFLIGHT_BYTES
        if (held["size"] or 0) + size > budget:
            raise ApplicationError("too_many_bytes_in_flight", f"Your resumable uploads would hold more than {budget} "
                                   "bytes; make the finished ones a batch or delete some first.", status_code=413,
                                   extra={"limit": budget})
        serializer.save(user=self.request.user)

    def get_success_headers(self, data) -> dict:
        return {"Location": reverse("api-resumable-detail", kwargs={"guid": data["guid"]})}


class ResumableDetailApi(_Tus, TusPatchMixin, TusHeadMixin, TusTerminateMixin, GenericAPIView):
    def head(self, request: Request, guid) -> Response:
        return self.info(request)

    @extend_schema(
        operation_id="uploads_resumable_append",
        request={"application/offset+octet-stream": {"type": "string", "format": "binary"}},
        responses={204: None, **errors(400, 409, 413, 415,
                                       _400="A tus header is missing or malformed (`Upload-Offset`, `Tus-Resumable`).",
                                       _409="`Upload-Offset` is not where the upload stands: ask with "
                                       "HEAD and send from there.",
                                       _413="The chunk is over FAIRLANE_RESUMABLE_CHUNK_BYTES "
                                       "(`chunk_too_large`) or past the upload's length (`chunk_past_length`).",
                                       _415="The chunk is not `application/offset+octet-stream`.")},
        parameters=[*TUS_HEADERS, OpenApiParameter("Upload-Offset", int, OpenApiParameter.HEADER, required=True)],
        description="Append a chunk at `Upload-Offset` (tus core). The answer's `Upload-Offset` is the new "
                    "size; once it equals `Upload-Length` the upload is finished: name it in "
                    "`POST /api/uploads/` (JSON, `resumable`).")
    def patch(self, request: Request, guid) -> Response:
        _check_chunk_headers(request)
        # drf-tus checks the offset, then writes: two PATCHes of one upload
        # at once (a client retrying while its first try is still being
        # written) would both pass the check and write the chunk twice. The
        # row lock makes the second wait, then see the new offset (409).
        with transaction.atomic():
            ResumableUpload.objects.select_for_update().filter(user=request.user, guid=guid).first()
            return self.partial_update(request)

    def _is_valid_content_type(self, request: Request) -> bool:  # drf-tus's, which compares the raw header
        return _is_chunk(request)

    @extend_schema(operation_id="uploads_resumable_destroy", responses={204: None, **errors(409)},
                   parameters=TUS_HEADERS, description="Give up a resumable upload (tus termination).")
    def delete(self, request: Request, guid) -> Response:
        return self.destroy(request)

    def get_chunk(self, request: Request) -> bytes:
        """The chunk, once drf-tus has found the upload and its offset to be
        the client's: at most FAIRLANE_RESUMABLE_CHUNK_BYTES, and no further
        than the length the upload declared, which its bytes were counted
        by (FAIRLANE_MAX_UPLOAD_BYTES, FAIRLANE_MAX_USER_INFLIGHT_BYTES):
        drf-tus would write past it, chunk after chunk, and the upload
        would never be finished. A refusal here rolls back patch()'s
        transaction, the upload's state included."""
        limit = settings.FAIRLANE_RESUMABLE_CHUNK_BYTES
        length = _content_length(request)
        if length > limit:
            raise ApplicationError("chunk_too_large", f"A chunk may carry at most {limit} bytes; send smaller chunks "
                                   "(tus-js-client: chunkSize).", status_code=413, extra={"limit": limit})
        upload = self.get_object()
        room = upload.upload_length - upload.upload_offset
        if length > room:
            raise ApplicationError("chunk_past_length", f"The upload declared {upload.upload_length} bytes and has "
                                   f"{upload.upload_offset}: a chunk may carry at most the {room} left.",
                                   status_code=413, extra={"remaining": room})
        return request._request.read(length)


def _is_chunk(request: Request) -> bool:
    """Content-Type: application/offset+octet-stream, in any case, with or
    without parameters (Django's content_type is the type alone)."""
    return (request.content_type or "").strip().lower() == TusUploadStreamParser.media_type


def _check_chunk_headers(request: Request) -> None:
    """What a chunk must carry, checked before drf-tus reads it: drf-tus
    takes Upload-Offset and Content-Type to be there (a PATCH without
    either was an AttributeError or a KeyError: a 500). tus answers a
    chunk of another type with 415."""
    if not _is_chunk(request):
        raise ApplicationError("unsupported_media_type", "A chunk is sent with "
                               f'"Content-Type: {TusUploadStreamParser.media_type}".', status_code=415)
    if not hasattr(request, constants.UPLOAD_OFFSET_NAME):  # set by TusMiddleware when the header parses
        raise ApplicationError("invalid_tus_header", 'A chunk needs an "Upload-Offset" header: where it starts '
                               "(a HEAD request tells where the upload stands).")


def _content_length(request: Request) -> int:
    """The chunk's size, as the client declared it. HTTP servers refuse a
    malformed Content-Length before us; the development server does not."""
    raw = (request.META.get("CONTENT_LENGTH") or "0").strip()
    if not (raw.isascii() and raw.isdigit()):  # not int()'s "+5", "5_0", "²"
        raise ApplicationError("invalid_content_length", "Content-Length must be the chunk's size in bytes.")
    return int(raw)


def uploads_create_from_resumable(*, owner, guids: list[str], scheduled_for=None) -> list:
    """services.uploads_create for the owner's finished resumable uploads
    `guids`: one batch, the same limits, storage and jobs as a multipart
    upload. One transaction: the resumable rows are locked (a concurrent
    claim of the same ones waits, then finds them gone: 400) and deleted
    with the batch's creation, and their files go only once it has
    committed; if anything fails, they are all still there to claim again.
    A guid that is not the owner's, unfinished or unknown is a 400 naming
    it, and nothing is created."""
    guids = list(dict.fromkeys(guids))  # the same upload named twice is one file
    if not guids:
        raise ApplicationError("no_files", "Name one or more finished resumable uploads in 'resumable'.")
    if len(guids) > settings.FAIRLANE_MAX_RESUMABLE_UPLOADS:
        raise ApplicationError("too_many_files", f"A batch may name at most {settings.FAIRLANE_MAX_RESUMABLE_UPLOADS} "
                               "resumable uploads.", status_code=413)
    with transaction.atomic():
        claimed = ResumableUpload.objects.select_for_update().filter(user=owner, guid__in=guids, state=states.DONE)
        found = {str(u.guid): u for u in claimed}
        missing = [g for g in guids if g not in found]
        if missing:
            raise ApplicationError("resumable_not_finished", "These resumable uploads are not yours, not finished "
                                   f"or unknown: {', '.join(missing)}.", extra={"resumable": missing})
        files = [_opened(found[guid]) for guid in guids]
        try:
            uploads = services.uploads_create(owner=owner, files=files, scheduled_for=scheduled_for)
        finally:
            for f in files:
                f.close()
        paths = [u.temporary_file_path for u in found.values()]
        ResumableUpload.objects.filter(pk__in=[u.pk for u in found.values()]).delete()  # rows only
        transaction.on_commit(lambda: _files_delete(paths))
    return uploads


def _opened(upload: ResumableUpload) -> UploadedFile:
    metadata = json.loads(upload.upload_metadata or "{}")
    name = os.path.basename(str(metadata.get("filename") or "upload"))[:255]
    return UploadedFile(open(upload.temporary_file_path, "rb"), name=name,  # noqa: SIM115 (closed by the caller)
                        content_type=str(metadata.get("filetype") or "")[:255], size=upload.upload_offset)


def _files_delete(paths: list[str]) -> None:
    """The claimed uploads' chunks, once their batch has committed. A file
    that cannot be removed is an orphan in FAIRLANE_RESUMABLE_DIR, logged."""
    for path in paths:
        try:
            os.remove(path)
        except FileNotFoundError:
            pass
        except OSError:
            log.exception("could not remove the claimed resumable upload %s", path)
