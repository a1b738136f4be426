"""The direct-upload API (uploads/direct.py): thin views over its services.
Only the owner reaches an upload (404 otherwise); refusals in the API's
error shape; an expired upload answers 410 everywhere."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from uploads import direct, throttling
from uploads.api_schema import errors
from uploads.models import DirectUpload

GONE = {"_410": "The upload expired (or was given up): it takes no more bytes and cannot be claimed."}


class NewFileSerializer(serializers.Serializer):
    filename = serializers.CharField(max_length=1024, help_text="As people know the file; display only.")
    size = serializers.IntegerField(
        min_value=1, required=False, allow_null=True, default=None,
        help_text="Bytes. Omit (or null) for a deferred length: each part is then sent with its size "
                  "(see parts), and the total counts what was signed.")
    content_type = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")


class DirectCreateSerializer(serializers.Serializer):
    files = NewFileSerializer(many=True, allow_empty=False)


class PartUrlSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    size = serializers.IntegerField(help_text="PUT exactly this many bytes (as Content-Length) to `url`.")
    url = serializers.CharField(help_text="Absolute, or relative to this site (files kept on disk).")
    headers = serializers.DictField(child=serializers.CharField(), help_text="Send these headers with the PUT "
                                    "(a file of one part: `If-None-Match: *`, which the URL is signed with).")


class PartSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    size = serializers.IntegerField()


class DirectUploadSerializer(serializers.ModelSerializer):
    parts = serializers.SerializerMethodField(help_text="How many parts a declared size takes; null if deferred.")

    class Meta:
        model = DirectUpload
        fields = ["id", "filename", "size", "part_size", "parts", "state", "created_at", "expires_at"]

    def get_parts(self, upload: DirectUpload) -> int | None:
        return direct.part_count(upload)


class DirectCreatedSerializer(DirectUploadSerializer):
    urls = PartUrlSerializer(many=True, help_text="URLs of the first parts (all of a small file's).")

    class Meta(DirectUploadSerializer.Meta):
        fields = [*DirectUploadSerializer.Meta.fields, "urls"]


class DirectStatusSerializer(DirectUploadSerializer):
    received = serializers.IntegerField(help_text="Bytes the store has.")
    parts_received = PartSerializer(many=True, help_text="The parts the store has; send only the others.")

    class Meta(DirectUploadSerializer.Meta):
        fields = [*DirectUploadSerializer.Meta.fields, "received", "parts_received"]


class PartRequestSerializer(serializers.Serializer):
    number = serializers.IntegerField(min_value=1)
    size = serializers.IntegerField(min_value=1, required=False, allow_null=True, default=None,
                                    help_text="A deferred length's part only: its size.")


class SignSerializer(serializers.Serializer):
    parts = serializers.ListField(
        child=serializers.JSONField(), allow_empty=False,
        help_text="Part numbers, or for a deferred length objects {number, size}.")

    def validate_parts(self, parts: list) -> list[tuple[int, int | None]]:
        out = []
        for item in parts:
            if isinstance(item, dict):
                part = PartRequestSerializer(data=item)
                part.is_valid(raise_exception=True)
                out.append((part.validated_data["number"], part.validated_data["size"]))
            elif isinstance(item, int) and not isinstance(item, bool) and item >= 1:
                out.append((item, None))
            else:
                raise serializers.ValidationError("Each part is a number (1 or more) or {number, size}.")
        return out


class CompleteSerializer(serializers.Serializer):
    uploads = serializers.ListField(child=serializers.UUIDField(format="hex_verbose"), allow_empty=False,
                                    max_length=10_000)


def _url(u: direct.PartUrl) -> dict:
    return {"number": u.number, "size": u.size, "url": u.url, "headers": u.headers}


def _created(created: list[tuple[DirectUpload, list[direct.PartUrl]]]) -> list[dict]:
    """The uploads with their URLs, serialized as one list: a serializer per
    upload would build its fields again for each (~1 ms of CPU a file)."""
    bodies = DirectUploadSerializer([upload for upload, _ in created], many=True).data
    for body, (_, urls) in zip(bodies, created):
        body["urls"] = [_url(u) for u in urls]
    return bodies


class _UploadingApi(APIView):
    """Its requests other than reads count as uploads against the user's
    API rates (uploads/throttling.py), not as writes."""

    throttle_scope = throttling.UPLOAD


class DirectUploadListApi(_UploadingApi):
    @extend_schema(
        operation_id="uploads_direct_create", request=DirectCreateSerializer,
        responses={201: DirectCreatedSerializer(many=True), **errors(
            400, 413, _413="A file over FAIRLANE_MAX_UPLOAD_BYTES, more files than a request may name, or more bytes "
            "in progress than your plan allows (FAIRLANE_MAX_USER_PENDING_BYTES by default).")},
        description="Start uploads straight into storage, one per file (at most FAIRLANE_MAX_FILES_PER_REQUEST "
                    "per request). Each comes with URLs for its first parts: PUT each part's bytes there, "
                    "exactly `size` of them. 429 (`too_many_pending_uploads`): more uploads in progress than "
                    "your plan allows (FAIRLANE_MAX_PENDING_UPLOADS by default).")
    def post(self, request: Request) -> Response:
        params = DirectCreateSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        created = direct.direct_uploads_create(owner=request.user, files=[
            direct.NewFile(f["filename"], f["size"], f["content_type"]) for f in params.validated_data["files"]])
        return Response({"uploads": _created(created)},
                        status=status.HTTP_201_CREATED)


class DirectUploadDetailApi(_UploadingApi):
    @extend_schema(operation_id="uploads_direct_retrieve", responses={200: DirectStatusSerializer, **errors(404, 410,
                                                                                                         **GONE)},
                   description="Where the upload stands, as the store says: after a reload, send only the parts "
                               "that are not in `parts_received`.")
    def get(self, request: Request, upload_id) -> Response:
        found = direct.direct_upload_status(owner=request.user, upload_id=upload_id)
        body = DirectUploadSerializer(found.upload).data
        body["received"] = found.received
        body["parts_received"] = [{"number": p.number, "size": p.size} for p in found.parts]
        return Response(body)

    @extend_schema(operation_id="uploads_direct_destroy", responses={204: None, **errors(404, 410, **GONE)},
                   description="Give the upload up: what it stored is deleted.")
    def delete(self, request: Request, upload_id) -> Response:
        direct.direct_upload_abort(owner=request.user, upload_id=upload_id)
        return Response(status=status.HTTP_204_NO_CONTENT)


class DirectUploadPartsApi(_UploadingApi):
    @extend_schema(
        operation_id="uploads_direct_parts", request=SignSerializer,
        responses={200: PartUrlSerializer(many=True), **errors(400, 404, 409, 410, 413, **GONE,
                                                              _409="The upload is complete: it takes no more bytes.")},
        description="URLs for more parts (each valid for FAIRLANE_UPLOAD_URL_TTL_S, never past the upload's "
                    "expiry; ask again for a lapsed one). A deferred length names each part's size: at most "
                    "`part_size`, a shorter one being the last.")
    def post(self, request: Request, upload_id) -> Response:
        params = SignSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        urls = direct.direct_upload_sign(owner=request.user, upload_id=upload_id,
                                         parts=params.validated_data["parts"])
        return Response({"urls": [_url(u) for u in urls]})


class DirectUploadCompleteApi(_UploadingApi):
    @extend_schema(
        operation_id="uploads_direct_complete", request=CompleteSerializer,
        responses={200: DirectUploadSerializer(many=True), **errors(
            400, 404, 409, 410, **GONE, _409="A part is missing or not the size its URL allowed (`missing` lists "
            "them); nothing was completed for that upload.")},
        description="Assemble uploads whose parts have all arrived (in the store: no bytes pass through "
                    "here). Completing a complete upload changes nothing. Claiming completes them too.")
    def post(self, request: Request) -> Response:
        params = CompleteSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        uploads = direct.direct_uploads_complete(owner=request.user, upload_ids=params.validated_data["uploads"])
        return Response({"uploads": DirectUploadSerializer(uploads, many=True).data})
