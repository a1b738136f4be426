"""The JSON API: thin views over services and selectors."""
from __future__ import annotations

from django.urls import reverse
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from uploads import selectors, services
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
            "id", "upload", "kind", "lane", "status", "progress", "attempts", "error",
            "created_at", "scheduled_for", "started_at", "finished_at", "wait_ms", "process_ms", "outputs",
        ]

    def get_upload(self, job: Job) -> dict:
        return {"id": str(job.upload_id), "filename": job.upload.filename, "size": job.upload.size,
                "batch": str(job.upload.batch)}


def job_url(request: Request, job_id) -> str:
    return request.build_absolute_uri(reverse("api-job-detail", args=[job_id]))


class UploadParamsSerializer(serializers.Serializer):
    scheduled_for = serializers.DateTimeField(required=False, allow_null=True, default=None)


class UploadCreateApi(APIView):
    parser_classes = [MultiPartParser]

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
                    "job": {"id": str(job.id), "status": job.status, "url": job_url(request, job.id)},
                }
                for upload in uploads
                for job in upload.jobs.all()
            ]
        }
        return Response(body, status=status.HTTP_202_ACCEPTED)


class JobListApi(ListAPIView):
    serializer_class = JobSerializer

    def get_queryset(self):
        wanted = self.request.query_params.get("status")
        if wanted and wanted not in Job.Status.values:
            raise ApplicationError("invalid_status", f"status must be one of {', '.join(Job.Status.values)}.")
        return selectors.jobs_for_user(user=self.request.user, status=wanted)


class JobDetailApi(APIView):
    def get(self, request: Request, job_id) -> Response:
        job = selectors.job_get_for_user(user=request.user, job_id=job_id)
        return Response(JobSerializer(job, context={"request": request}).data)
