"""The JSON API: thin views over services and selectors.

Everything a user owns is looked up from the user (selectors), so another
user's upload, job or batch is a 404. Errors have one shape
(uploads/api_errors.py); the OpenAPI schema at /api/schema/ is generated from
these views and their `extend_schema` notes (docs/api.md).
"""
from __future__ import annotations

import hashlib
import time
import uuid
from collections.abc import Callable

from django.conf import settings
from django.db import models
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field,
                                   extend_schema_view)
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.parsers import JSONParser, MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from uploads import batch_summary, direct, live, selectors, services, throttling, upload_limits
from uploads.api_schema import errors
from uploads.delivery import output_url
from uploads.errors import ApplicationError
from uploads.idempotency import HEADER as IDEMPOTENCY_HEADER
from uploads.idempotency import idempotent
from uploads.models import Batch, Job, Upload

IDEMPOTENCY_PARAMETER = OpenApiParameter(
    IDEMPOTENCY_HEADER, OpenApiTypes.STR, OpenApiParameter.HEADER, required=False,
    description="Optional, up to 255 printable ASCII characters (a UUID is ideal). Sending the same request "
                "again with the same key within 24 hours returns the first answer (with the header "
                "`Idempotent-Replayed: true`) and creates nothing; the same key with a different request is "
                "a 422. Only successful answers are kept: after an error the key may be used again.")


class OutputSerializer(serializers.Serializer):
    name = serializers.CharField()
    label = serializers.CharField(help_text="The name as people read it, e.g. `large (JPEG)` for `large_jpeg`.")
    content_type = serializers.CharField()
    size = serializers.IntegerField()
    metadata = serializers.JSONField()
    url = serializers.SerializerMethodField(help_text="Signed link; expires after FAIRLANE_URL_MAX_AGE_S.")

    def get_url(self, output) -> str:
        return self.context["request"].build_absolute_uri(output_url(output))


class JobUploadSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    filename = serializers.CharField()
    size = serializers.IntegerField()
    batch = serializers.UUIDField()


class JobOrganisationSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()


class JobErrorSerializer(serializers.Serializer):
    code = serializers.CharField()
    message = serializers.CharField()


class StreamSerializer(serializers.Serializer):
    url = serializers.CharField(help_text="Signed link to the HLS master playlist: while `live`, playlists that "
                                          "grow as the video is encoded (their link stays valid while it runs), "
                                          "then the finished ladder's.")
    live = serializers.BooleanField(help_text="Still being processed: the playlists grow, and end once the last "
                                              "segment is encoded.")
    renditions = serializers.ListField(child=serializers.CharField(), help_text="The renditions ready to play "
                                       "(`240p`, ...), in ladder order.")
    encoded_s = serializers.FloatField(help_text="Seconds of the video that can be played, from its start.")
    duration_s = serializers.FloatField(help_text="The whole video's length.")


class JobSerializer(serializers.ModelSerializer):
    upload = serializers.SerializerMethodField(help_text="The file this job processes; null for an export.")
    batch = serializers.SerializerMethodField()
    organisation = serializers.SerializerMethodField(help_text="Whose share of the workers it runs in: its owner's "
                                                     "organisation (everyone is in exactly one: alone, one named "
                                                     "after them); null for a user not in one yet.")
    error = serializers.SerializerMethodField(help_text="Why the job failed or was canceled; null otherwise.")
    stream = serializers.SerializerMethodField(help_text="What of a video can be watched now, while it is still "
                                               "being processed too; null when nothing can (yet).")
    outputs = OutputSerializer(many=True)

    class Meta:
        model = Job
        fields = [
            "organisation",
            "id", "upload", "batch", "kind", "lane", "status", "progress", "attempts", "error",
            "created_at", "scheduled_for", "started_at", "finished_at", "wait_ms", "process_ms", "playable_at",
            "stream", "outputs",
        ]
        extra_kwargs = {"playable_at": {"help_text": "When a video could first be watched (its first seconds "
                                                     "encoded and stored), before it finished; null until then."}}

    @extend_schema_field(JobUploadSerializer(allow_null=True))
    def get_upload(self, job: Job) -> dict | None:
        if job.upload is None:  # an export job: it works on a batch, not one upload
            return None
        return {"id": str(job.upload_id), "filename": job.upload.filename, "size": job.upload.size,
                "batch": str(job.upload.batch)}

    @extend_schema_field(OpenApiTypes.UUID)
    def get_batch(self, job: Job) -> str:
        return str(job.batch or job.upload.batch)

    @extend_schema_field(JobOrganisationSerializer(allow_null=True))
    def get_organisation(self, job: Job) -> dict | None:
        """Read once per owner and answer (the context is shared by a list's
        jobs, and a user's list has one owner)."""
        from organisations import organisations_of

        known = self.context.setdefault("organisations", {})
        if job.owner_id not in known:
            known.update(dict.fromkeys([job.owner_id]))
            known.update({user_id: {"id": b.organisation_id, "name": b.name}
                          for user_id, b in organisations_of(user_ids=[job.owner_id]).items()})
        return known[job.owner_id]

    @extend_schema_field(JobErrorSerializer(allow_null=True))
    def get_error(self, job: Job) -> dict | None:
        return job.error

    @extend_schema_field(StreamSerializer(allow_null=True))
    def get_stream(self, job: Job) -> dict | None:
        stream = live.stream_for(job)
        if stream is None:
            return None
        return {"url": self.context["request"].build_absolute_uri(stream.url), "live": stream.live,
                "renditions": [r["name"] for r in stream.renditions], "encoded_s": stream.encoded_s,
                "duration_s": stream.duration_s}


def job_url(request: Request, job_id) -> str:
    return request.build_absolute_uri(reverse("api-job-detail", args=[job_id]))


def _uuid_param(request: Request, name: str) -> uuid.UUID | None:
    value = request.query_params.get(name)
    if not value:
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        raise ApplicationError(f"invalid_{name}", f"{name} must be a UUID.") from None


def _choice_param(request: Request, name: str, choices: type[models.TextChoices]) -> str | None:
    value = request.query_params.get(name)
    if value and value not in choices.values:
        raise ApplicationError(f"invalid_{name}", f"{name} must be one of {', '.join(choices.values)}.")
    return value or None


BATCH_FILTER = OpenApiParameter("batch", OpenApiTypes.UUID, description="Only this batch's.")


# --- uploads --------------------------------------------------------------------------


class UploadJobSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=Job.Status.choices)
    progress = serializers.IntegerField(required=False)
    url = serializers.URLField()


class UploadSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    filename = serializers.CharField(help_text="As the client named it.")
    size = serializers.IntegerField()
    batch = serializers.UUIDField()
    created_at = serializers.DateTimeField()
    job = serializers.SerializerMethodField()

    @extend_schema_field(UploadJobSerializer)
    def get_job(self, upload: Upload) -> dict:
        job = getattr(upload, "accepted_job", None) or upload.jobs.all()[0]
        return {"id": str(job.id), "status": job.status, "progress": job.progress,
                "url": job_url(self.context["request"], job.id)}


class UploadParamsSerializer(serializers.Serializer):
    scheduled_for = serializers.DateTimeField(required=False, allow_null=True, default=None,
                                              help_text="Not before this time (with a time zone).")
    batch_name = serializers.CharField(required=False, allow_blank=True, default="", max_length=Batch.NAME_MAX_LENGTH,
                                       help_text="The batch's name; without one, its first file's name (and how "
                                                 "many more), or its date.")


class UploadCreateSerializer(UploadParamsSerializer):
    """For the schema: what the multipart body carries (the files are
    checked by the service, which answers `no_files` without them)."""

    file = serializers.ListField(child=serializers.FileField(), help_text="One or more files, each in a part "
                                 "named `file`; they form one batch.")


class UploadFromDirectSerializer(UploadParamsSerializer):
    """The JSON body that turns direct uploads (POST /api/uploads/direct/) into a batch."""

    direct = serializers.ListField(
        child=serializers.UUIDField(format="hex_verbose"), allow_empty=False,
        help_text="Ids of direct uploads whose parts have all arrived (completed here if they are not yet); "
                  "they form one batch, and their keys become its files: nothing is copied.")


class UploadCreateResponseSerializer(serializers.Serializer):
    batch = serializers.UUIDField()
    batch_url = serializers.URLField()
    uploads = UploadSerializer(many=True)


class UploadListCreateApi(ListAPIView):
    """GET: the user's uploads, newest first. POST: upload files (a batch)."""

    serializer_class = UploadSerializer
    parser_classes = [MultiPartParser, JSONParser]
    throttle_scope = throttling.UPLOAD  # its POST, against the user's API rates

    def dispatch(self, request, *args, **kwargs):
        try:
            return super().dispatch(request, *args, **kwargs)
        finally:
            upload_limits.release(request)

    def initial(self, request: Request, *args, **kwargs) -> None:
        # Before authentication: a session's CSRF check may read the body.
        request._request.upload_handlers = [upload_limits.LimitedUploadHandler(request._request)]
        super().initial(request, *args, **kwargs)

    def get_queryset(self):
        return selectors.uploads_for_user(user=self.request.user, batch=_uuid_param(self.request, "batch"))

    @extend_schema(operation_id="uploads_list", parameters=[BATCH_FILTER], responses={
        200: UploadSerializer(many=True), **errors(400)})
    def get(self, request: Request, *args, **kwargs) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(
        operation_id="uploads_create", request={"multipart/form-data": UploadCreateSerializer,
                                                "application/json": UploadFromDirectSerializer},
        parameters=[IDEMPOTENCY_PARAMETER],
        responses={202: UploadCreateResponseSerializer, **errors(400, 413, 422)},
        description="Store the files and queue a job for each (202: accepted, not yet processed). Too many "
                    "files or a file over the size limit: 413, nothing stored. More jobs queued, scheduled or "
                    "running than your plan allows: 429 `too_many_queued_jobs`, nothing created (direct uploads "
                    "stay in progress, to be claimed later). Multipart: the files themselves. "
                    "JSON: `direct`, uploads sent straight into storage (POST /api/uploads/direct/), which are "
                    "taken over (and leave the list of uploads in progress) when the batch is created.")
    @idempotent("uploads_create")
    def post(self, request: Request) -> Response:
        if request.content_type.startswith("application/json"):
            params = UploadFromDirectSerializer(data=request.data)
            params.is_valid(raise_exception=True)
            uploads = direct.uploads_create_from_direct(
                owner=request.user, upload_ids=params.validated_data["direct"],
                scheduled_for=params.validated_data["scheduled_for"], batch_name=params.validated_data["batch_name"])
        else:
            params = UploadParamsSerializer(data=request.data)
            params.is_valid(raise_exception=True)
            uploads = services.uploads_create(
                owner=request.user, files=request.FILES.getlist("file"),
                scheduled_for=params.validated_data["scheduled_for"], batch_name=params.validated_data["batch_name"],
            )
        batch = uploads[0].batch
        body = {
            "batch": str(batch),
            "batch_url": request.build_absolute_uri(reverse("api-batch-detail", args=[batch])),
            "uploads": UploadSerializer(uploads, many=True, context={"request": request}).data,
        }
        return Response(body, status=status.HTTP_202_ACCEPTED)


class UploadDetailApi(APIView):
    @extend_schema(operation_id="uploads_retrieve", responses={200: UploadSerializer})
    def get(self, request: Request, upload_id) -> Response:
        upload = selectors.upload_get_for_user(user=request.user, upload_id=upload_id)
        return Response(UploadSerializer(upload, context={"request": request}).data)

    @extend_schema(
        operation_id="uploads_destroy", responses={204: None},
        description="Delete the upload with its job, outputs and every stored file, and the exports of its "
                    "batch (their ZIPs hold copies of its outputs). A queued or running job is canceled "
                    "first (a running one stops at its next progress report).")
    def delete(self, request: Request, upload_id) -> Response:
        upload = selectors.upload_get_for_user(user=request.user, upload_id=upload_id)
        services.uploads_delete(uploads=[upload], actor=request.user)
        batch_summary.forget(user_id=request.user.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


# --- jobs -----------------------------------------------------------------------------

# What a job row on the page shows that can change while it is listed; the
# list's ETag is a hash of these for the requested page (one light query
# without joins), so an idle poll is a 304 with nothing serialized.
JOB_LIST_FINGERPRINT_FIELDS = ("id", "created_at", "status", "progress", "attempts", "kind", "error_code",
                               "started_at", "finished_at", "wait_ms", "playable_at")


MAX_SEARCH_LENGTH = 100


class JobListSerializer(serializers.Serializer):
    """For the schema: a cursor page of jobs, with the list's count."""

    next = serializers.URLField(allow_null=True)
    previous = serializers.URLField(allow_null=True)
    count = serializers.IntegerField(help_text="Jobs matching the filters, on every page.")
    results = JobSerializer(many=True)


class JobListApi(ListAPIView):
    """The user's jobs, newest first. Conditional: the upload page polls it
    with If-None-Match and gets 304 Not Modified while nothing changed."""

    serializer_class = JobSerializer

    def get_queryset(self):
        search = self.request.query_params.get("search", "").strip()
        if len(search) > MAX_SEARCH_LENGTH:
            raise ApplicationError("invalid_search", f"search is at most {MAX_SEARCH_LENGTH} characters.")
        return selectors.jobs_for_user(user=self.request.user, status=_choice_param(self.request, "status", Job.Status),
                                       kind=_choice_param(self.request, "kind", Job.Kind),
                                       batch=_uuid_param(self.request, "batch"), search=search)

    def _etag(self, queryset, count: int) -> str:
        """The page's fingerprint: its rows' changing fields, its links and
        the list's count, read through the same paginator (so a bad cursor
        is the same 400)."""
        light = queryset.select_related(None).prefetch_related(None).values_list(*JOB_LIST_FINGERPRINT_FIELDS,
                                                                                 named=True)
        rows = self.paginator.paginate_queryset(light, self.request, view=self)
        links = (self.paginator.get_next_link(), self.paginator.get_previous_link())
        # Output links are signed and expire: a new tag every half lifetime
        # hands the page fresh ones before the old ones die.
        epoch = int(time.time() // max(1, settings.FAIRLANE_URL_MAX_AGE_S // 2))
        digest = hashlib.sha256(repr((links, epoch, count, [tuple(row) for row in rows])).encode()).hexdigest()[:32]
        return f'"{digest}"'

    @extend_schema(
        operation_id="jobs_list",
        parameters=[
            OpenApiParameter("status", OpenApiTypes.STR, enum=Job.Status.values, description="Only jobs in it."),
            OpenApiParameter("kind", OpenApiTypes.STR, enum=Job.Kind.values, description="Only jobs of this kind "
                             "(`export`: a batch's ZIP exports)."),
            BATCH_FILTER,
            OpenApiParameter("search", OpenApiTypes.STR, description="Only files whose name contains this "
                             f"(any case; at most {MAX_SEARCH_LENGTH} characters)."),
            OpenApiParameter("If-None-Match", OpenApiTypes.STR, OpenApiParameter.HEADER,
                             description="The ETag of an earlier answer: 304 while the page is unchanged."),
        ],
        responses={200: JobListSerializer, 304: OpenApiResponse(description="Not modified."), **errors(400)},
    )
    def get(self, request: Request, *args, **kwargs) -> Response:
        queryset = self.get_queryset()
        # The pages show "2,000 files, page 3 of 40": one COUNT over the
        # user's index, part of the ETag (files arriving change it).
        count = queryset.count()
        etag = self._etag(queryset, count)
        headers = {"ETag": etag, "Cache-Control": "private, no-cache"}
        if etag in [tag.strip() for tag in request.headers.get("If-None-Match", "").split(",")]:
            return Response(status=status.HTTP_304_NOT_MODIFIED, headers=headers)
        response = self.get_paginated_response(self.get_serializer(
            self.paginate_queryset(queryset), many=True).data)
        response.data["count"] = count
        for name, value in headers.items():
            response[name] = value
        return response


class MovingCountsSerializer(serializers.Serializer):
    running = serializers.IntegerField()
    queued = serializers.IntegerField()


class JobsMovingSerializer(serializers.Serializer):
    running = JobSerializer(many=True, help_text=f"Running now, first started first (at most "
                                                 f"{selectors.MOVING_SHOWN}).")
    finished = JobSerializer(many=True, help_text=f"Ended in the last {selectors.MOVING_RECENT_S // 60} minutes, "
                                                  f"last ended first (at most {selectors.MOVING_SHOWN}).")
    counts = MovingCountsSerializer(help_text="All running and queued jobs (of the batch).")


class JobsMovingApi(APIView):
    """What is moving among the user's jobs (or a batch's): the upload page
    shows it above the newest-first list, whose first pages are all queued
    while a flood is processed oldest first."""

    @extend_schema(operation_id="jobs_moving", parameters=[BATCH_FILTER],
                   responses={200: JobsMovingSerializer, **errors(400)})
    def get(self, request: Request) -> Response:
        moving = selectors.jobs_moving(user=request.user, batch=_uuid_param(request, "batch"))
        context = {"request": request}
        return Response({"running": JobSerializer(moving.running, many=True, context=context).data,
                         "finished": JobSerializer(moving.finished, many=True, context=context).data,
                         "counts": {"running": moving.running_count, "queued": moving.queued_count}})


def _job_for(request: Request, job_id) -> Job:
    return selectors.job_get_for_user(user=request.user, job_id=job_id)


def _job_answer(request: Request, job_id, code: int = status.HTTP_200_OK) -> Response:
    return Response(JobSerializer(_job_for(request, job_id), context={"request": request}).data, status=code)


class JobDetailApi(APIView):
    @extend_schema(operation_id="jobs_retrieve", responses={200: JobSerializer})
    def get(self, request: Request, job_id) -> Response:
        return _job_answer(request, job_id)

    @extend_schema(
        operation_id="jobs_destroy", responses={204: None},
        description="Delete the job and everything it made. A file's job goes with its upload (as DELETE "
                    "/api/uploads/<id>/); an export job with its ZIP. Unfinished jobs are canceled first.")
    def delete(self, request: Request, job_id) -> Response:
        job = _job_for(request, job_id)
        if job.upload_id:
            services.uploads_delete(uploads=[job.upload], actor=request.user)
        else:
            services.export_delete(job=job, actor=request.user)
        batch_summary.forget(user_id=request.user.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


class _JobActionApi(APIView):
    """POST on one job: an operator service applied to it when its state
    allows (`allowed`), else 409 with `refusal` (code, message)."""

    allowed: tuple[str, ...]
    action: Callable[..., list[Job]]
    refusal: tuple[str, str]
    answer_status = status.HTTP_200_OK

    def post(self, request: Request, job_id) -> Response:
        job = _job_for(request, job_id)
        if job.status not in self.allowed or not self.action(job_ids=[job.id], actor=request.user):
            code, message = self.refusal
            raise ApplicationError(code, message.format(status=job.status), status_code=status.HTTP_409_CONFLICT)
        # The user's next poll shows this (a kept answer may be seconds old: uploads/batch_summary.py).
        batch_summary.forget(user_id=request.user.pk)
        return _job_answer(request, job_id, self.answer_status)


@extend_schema_view(post=extend_schema(
    operation_id="jobs_cancel", request=None, responses={200: JobSerializer, **errors(409)},
    description="Cancel a queued or running job: the answer says `canceled` at once; a running job's worker "
                "stops at its next progress report. 409 `not_cancelable` when it has ended."))
class JobCancelApi(_JobActionApi):
    allowed = Job.UNFINISHED
    action = staticmethod(services.jobs_cancel)
    refusal = ("not_cancelable", "The job has ended ({status}); nothing to cancel.")


@extend_schema_view(post=extend_schema(
    operation_id="jobs_retry", request=None, responses={202: JobSerializer, **errors(409)},
    description="Run a failed or canceled job again: queued through the fair dispatcher like a new job, as a "
                "fresh attempt; its old outputs are dropped. 409 `not_retryable` otherwise; 429 "
                "`too_many_queued_jobs` past your plan's jobs queued at once."))
class JobRetryApi(_JobActionApi):
    allowed = (Job.Status.FAILED, Job.Status.CANCELED)
    action = staticmethod(services.jobs_retry)
    refusal = ("not_retryable", "Only failed or canceled jobs can be retried; this one is {status}.")
    answer_status = status.HTTP_202_ACCEPTED


# --- batches --------------------------------------------------------------------------


class EstimateRateSerializer(serializers.Serializer):
    key = serializers.CharField(help_text="The kind of work: `image`, `pdf`, `audio`, `video:<band>` (360, 720, "
                                          "1080, 2160: the frame's short side) once a file is probed; before, "
                                          "`pre:image`, `pre:video`, `pre:audio`, `pre:pdf`, `pre:other` from the "
                                          "file's name; `export`.")
    unit = serializers.CharField(help_text="`file`, `second` (of input media), `MB` (of input) or `cost_s`.")
    jobs = serializers.IntegerField(help_text="Your unfinished files of this key, up to this batch's last.")
    units = serializers.FloatField(help_text="Their units still to do (a running file by what is left).")
    seconds_per_unit = serializers.FloatField(
        allow_null=True, help_text="Slot seconds per unit, measured from your finished files of this key (and, "
                                   "while you have few, everyone's); null when nobody's are measured yet, and the "
                                   "files' static estimates are used.")
    source = serializers.CharField(help_text="`yours`, `yours and everyone's`, `everyone's` or `not measured yet`.")
    samples = serializers.IntegerField(help_text="Your finished files measured for this key.")
    worker_s = serializers.FloatField(help_text="Slot seconds of this key's work still to do.")


class EstimateBasisSerializer(serializers.Serializer):
    seconds = serializers.FloatField(help_text="From now to the estimated finish.")
    seconds_low = serializers.FloatField(help_text="The low end of the estimate's range (90 % if the errors of "
                                                   "the measured rates were normal).")
    seconds_high = serializers.FloatField(help_text="The high end of the range.")
    finish_low_at = serializers.DateTimeField(help_text="The earliest finish of the range.")
    finish_high_at = serializers.DateTimeField(help_text="The latest finish of the range.")
    uncertainty = serializers.FloatField(help_text="Relative standard deviation of the remaining work: the spread "
                                                   "of single files, and of the rates themselves.")
    remaining_worker_s = serializers.FloatField(
        help_text="Your estimated slot seconds still to do up to this batch's last file (your earlier files "
                  "run first): the sum of `rates`' `worker_s`.")
    share = serializers.FloatField(help_text="Share of the lane's slots assumed for you: your weight over the "
                                             "weights of everyone with work now.")
    slots = serializers.IntegerField(help_text="The lane's worker slots.")
    throughput_worker_s_per_s = serializers.FloatField(
        help_text="slots x share, at most your cap and your unfinished files (a file runs on one slot).")
    rates = EstimateRateSerializer(many=True, help_text="The work per kind, and what it was priced at.")
    kind = serializers.CharField(help_text="Always `estimate`.")
    basis = serializers.CharField()


class BatchSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField(help_text="Given at upload or rename; else the first file's name (and how many "
                                           "more), or the date.")
    created_at = serializers.DateTimeField()
    files = serializers.IntegerField()
    counts = serializers.DictField(child=serializers.IntegerField(), help_text="Jobs per status.")
    progress = serializers.IntegerField(help_text="Percent of the batch's estimated work done (ended jobs count "
                                                  "whole).")
    finished = serializers.BooleanField(help_text="Every job has ended (succeeded, failed or canceled).")
    estimated_finish_at = serializers.DateTimeField(
        allow_null=True, help_text="An estimate, from your share of the workers now and the measured rates of your "
                                   "kinds of files; its range is in `estimate`. Null when finished or when the "
                                   "dispatcher cannot be asked.")
    estimate = EstimateBasisSerializer(allow_null=True, help_text="How `estimated_finish_at` was reached, and its "
                                                                  "range.")
    jobs_url = serializers.URLField()
    uploads_url = serializers.URLField()


def _batch_bodies(request: Request, batches: list[Batch], fresh: bool = False) -> list[dict]:
    """Each batch with its progress and, while unfinished, its estimate
    (uploads/batch_summary.py: a large batch's for a moment reused)."""
    summaries = batch_summary.batches_summary(user=request.user, batch_ids=[batch.id for batch in batches],
                                              fresh=fresh)
    bodies = []
    for batch in batches:
        item, estimate = summaries[batch.id].progress, summaries[batch.id].estimate
        query = f"?batch={batch.id}"
        bodies.append({
            "id": batch.id, "name": batch.display_name, "created_at": batch.created_at, "files": item.files,
            "counts": item.counts,
            "progress": item.progress, "finished": not item.unfinished,
            "estimated_finish_at": estimate.finish_at if estimate else None,
            "estimate": estimate.as_dict() if estimate else None,
            "jobs_url": request.build_absolute_uri(reverse("api-job-list") + query),
            "uploads_url": request.build_absolute_uri(reverse("api-upload-list") + query),
        })
    return bodies


def _batch_answer(request: Request, batch: Batch, code: int = status.HTTP_200_OK, wrote: bool = False) -> Response:
    """`wrote`: the answer to the user's write, from the database, and
    their kept poll answers are not used again."""
    if wrote:
        batch_summary.forget(user_id=request.user.pk)
    return Response(BatchSerializer(_batch_bodies(request, [batch], fresh=wrote)[0]).data, status=code)


class BatchListApi(ListAPIView):
    serializer_class = BatchSerializer

    def get_queryset(self):
        return selectors.batches_for_user(user=self.request.user)

    @extend_schema(operation_id="batches_list")
    def get(self, request: Request, *args, **kwargs) -> Response:
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(BatchSerializer(_batch_bodies(request, page), many=True).data)


class BatchRenameSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=Batch.NAME_MAX_LENGTH, help_text="What people call the batch.")


def _batch_for(request: Request, batch_id) -> Batch:
    return selectors.batch_get_for_user(user=request.user, batch_id=batch_id)


class BatchDetailApi(APIView):
    @extend_schema(operation_id="batches_retrieve", responses={200: BatchSerializer})
    def get(self, request: Request, batch_id) -> Response:
        return _batch_answer(request, _batch_for(request, batch_id))

    @extend_schema(operation_id="batches_partial_update", request=BatchRenameSerializer,
                   responses={200: BatchSerializer, **errors(400)}, description="Rename the batch.")
    def patch(self, request: Request, batch_id) -> Response:
        params = BatchRenameSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        batch = services.batch_rename(batch=_batch_for(request, batch_id), name=params.validated_data["name"])
        return _batch_answer(request, batch, wrote=True)

    @extend_schema(operation_id="batches_destroy", responses={204: None},
                   description="Delete every upload of the batch, as DELETE /api/uploads/<id>/ does, and "
                               "its exports.")
    def delete(self, request: Request, batch_id) -> Response:
        batch = _batch_for(request, batch_id)
        services.uploads_delete(uploads=selectors.uploads_for_user(user=request.user, batch=batch.id),
                                actor=request.user)
        batch_summary.forget(user_id=request.user.pk)
        return Response(status=status.HTTP_204_NO_CONTENT)


class _BatchActionApi(APIView):
    """POST on one batch: a service over every job of it that it applies to."""

    action: Callable[..., list[Job]]
    answer_status = status.HTTP_200_OK

    def post(self, request: Request, batch_id) -> Response:
        batch = _batch_for(request, batch_id)
        self.action(batch=batch, actor=request.user)
        return _batch_answer(request, batch, self.answer_status, wrote=True)


@extend_schema_view(post=extend_schema(
    operation_id="batches_cancel", request=None, responses={200: BatchSerializer},
    description="Cancel every queued or running job of the batch, its exports too (as POST "
                "/api/jobs/<id>/cancel/ does); ended jobs are left alone."))
class BatchCancelApi(_BatchActionApi):
    action = staticmethod(services.batch_cancel)


@extend_schema_view(post=extend_schema(
    operation_id="batches_retry", request=None, responses={202: BatchSerializer},
    description="Retry every failed or canceled job of the batch (as POST /api/jobs/<id>/retry/ does); "
                "429 `too_many_queued_jobs`, and none is retried, when they would not all fit your plan's jobs "
                "queued at once."))
class BatchRetryApi(_BatchActionApi):
    action = staticmethod(services.batch_retry)
    answer_status = status.HTTP_202_ACCEPTED
