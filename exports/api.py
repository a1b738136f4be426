"""POST /api/exports/ {"batch": uuid}: start a ZIP export of a batch's outputs."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from exports import services
from uploads.api import IDEMPOTENCY_PARAMETER, JobSerializer
from uploads.api_schema import errors
from uploads.idempotency import idempotent


class ExportParamsSerializer(serializers.Serializer):
    batch = serializers.UUIDField(help_text="One of your batches.")


class ExportCreateApi(APIView):
    @extend_schema(
        operation_id="exports_create", request=ExportParamsSerializer, parameters=[IDEMPOTENCY_PARAMETER],
        responses={202: JobSerializer, **errors(404, 422, _404="No such batch among yours.")},
        description="Queue a ZIP of the batch's finished outputs: an `export` job (follow it at "
                    "/api/jobs/<id>/; its output `zip` is the archive). It fails with `nothing_to_export` when "
                    "no file of the batch has finished yet.")
    @idempotent("exports_create")
    def post(self, request: Request) -> Response:
        params = ExportParamsSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        job = services.export_create(owner=request.user, batch=params.validated_data["batch"])
        return Response(JobSerializer(job, context={"request": request}).data, status=status.HTTP_202_ACCEPTED)
