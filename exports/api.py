"""POST /api/exports/ {"batch": uuid}: start a ZIP export of a batch's outputs."""
from __future__ import annotations

from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from exports import services
from uploads.api import JobSerializer


class ExportParamsSerializer(serializers.Serializer):
    batch = serializers.UUIDField()


class ExportCreateApi(APIView):
    def post(self, request: Request) -> Response:
        params = ExportParamsSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        job = services.export_create(owner=request.user, batch=params.validated_data["batch"])
        return Response(JobSerializer(job, context={"request": request}).data, status=status.HTTP_202_ACCEPTED)
