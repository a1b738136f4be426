"""The JSON API: thin views over services and selectors."""
from __future__ import annotations

import hashlib
import time

from django.conf import settings
from django.urls import reverse
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from uploads import selectors, services, upload_limits
from uploads.delivery import output_url
from uploads.errors import ApplicationError
from uploads.models import Job


class OutputSerializer(serializers.Serializer):
    name = serializers.CharField()
    content_type = serializers.CharField()
    size = serializers.IntegerField()
    metadata = serializers.JSONField()
    url = serializers.SerializerMethodField()

    def get_url(self, output) -> str:
        return self.context["request"].build_absolute_uri(output_url(output))


class JobSerializer(serializers.ModelSerializer):
    upload = serializers.SerializerMethodField()
    error = serializers.JSONField()
    outputs = OutputSerializer(many=True)

    class Meta:
        model = Job
        fields = [
            "id", "upload", "batch", "kind", "lane", "status", "progress", "attempts", "error",
            "created_at", "scheduled_for", "started_at", "finished_at", "wait_ms", "process_ms", "outputs",
        ]

    batch = serializers.SerializerMethodField()

    def get_upload(self, job: Job) -> dict | None:
        if job.upload is None:  # an export job: it works on a batch, not one upload
            return None
        return {"id": str(job.upload_id), "filename": job.upload.filename, "size": job.upload.size,
                "batch": str(job.upload.batch)}

    def get_batch(self, job: Job) -> str:
        return str(job.batch or job.upload.batch)


def job_url(request: Request, job_id) -> str:
    return request.build_absolute_uri(reverse("api-job-detail", args=[job_id]))


class UploadParamsSerializer(serializers.Serializer):
    scheduled_for = serializers.DateTimeField(required=False, allow_null=True, default=None)


class UploadCreateApi(APIView):
    parser_classes = [MultiPartParser]

    def dispatch(self, request, *args, **kwargs):
        try:
            return super().dispatch(request, *args, **kwargs)
        finally:
            upload_limits.release(request)

    def initial(self, request: Request, *args, **kwargs) -> None:
        # Before authentication: a session's CSRF check may read the body.
        request._request.upload_handlers = [upload_limits.LimitedUploadHandler(request._request)]
        super().initial(request, *args, **kwargs)

    def post(self, request: Request) -> Response:
        params = UploadParamsSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        uploads = services.uploads_create(
            owner=request.user, files=request.FILES.getlist("file"),
            scheduled_for=params.validated_data["scheduled_for"],
        )
        body = {
            "uploads": [
                {
                    "id": str(upload.id),
                    "filename": upload.filename,
                    "batch": str(upload.batch),
                    "job": {"id": str(upload.accepted_job.id), "status": upload.accepted_job.status,
                            "url": job_url(request, upload.accepted_job.id)},
                }
                for upload in uploads
            ]
        }
        return Response(body, status=status.HTTP_202_ACCEPTED)


# What a job row on the page shows that can change while it is listed; the
# list's ETag is a hash of these for the requested page (one light query
# without joins), so an idle poll is a 304 with nothing serialized.
JOB_LIST_FINGERPRINT_FIELDS = ("id", "status", "progress", "attempts", "kind", "error_code", "started_at",
                               "finished_at", "wait_ms")


class JobListApi(ListAPIView):
    """The user's jobs, newest first. Conditional: the upload page polls it
    with If-None-Match and gets 304 Not Modified while nothing changed."""

    serializer_class = JobSerializer

    def get_queryset(self):
        wanted = self.request.query_params.get("status")
        if wanted and wanted not in Job.Status.values:
            raise ApplicationError("invalid_status", f"status must be one of {', '.join(Job.Status.values)}.")
        return selectors.jobs_for_user(user=self.request.user, status=wanted)

    def _etag(self, queryset) -> str:
        page_size = self.paginator.get_page_size(self.request) or 0
        try:
            page = max(1, int(self.request.query_params.get(self.paginator.page_query_param, 1)))
        except ValueError:
            page = 1
        rows = list(queryset.values_list(*JOB_LIST_FINGERPRINT_FIELDS)[(page - 1) * page_size: page * page_size])
        # Output links are signed and expire: a new tag every half lifetime
        # hands the page fresh ones before the old ones die.
        epoch = int(time.time() // max(1, settings.FAIRLANE_URL_MAX_AGE_S // 2))
        digest = hashlib.sha256(repr((queryset.count(), epoch, rows)).encode()).hexdigest()[:32]
        return f'"{digest}"'

    def list(self, request: Request, *args, **kwargs) -> Response:
        etag = self._etag(self.get_queryset())
        headers = {"ETag": etag, "Cache-Control": "private, no-cache"}
        if etag in [tag.strip() for tag in request.headers.get("If-None-Match", "").split(",")]:
            return Response(status=status.HTTP_304_NOT_MODIFIED, headers=headers)
        response = super().list(request, *args, **kwargs)
        for name, value in headers.items():
            response[name] = value
        return response


class JobDetailApi(APIView):
    def get(self, request: Request, job_id) -> Response:
        job = selectors.job_get_for_user(user=request.user, job_id=job_id)
        return Response(JobSerializer(job, context={"request": request}).data)
