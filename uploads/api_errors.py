"""Every API error has the same shape: {"error": {"code", "message", ...}}."""
from __future__ import annotations

from typing import Any

from django.http import Http404
from rest_framework import exceptions
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from uploads.errors import ApplicationError


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, ApplicationError):
        body = {"code": exc.code, "message": exc.message, **exc.extra}
        return Response({"error": body}, status=exc.status_code)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    detail = response.data
    if isinstance(exc, exceptions.APIException):
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else "invalid"
        message = detail.get("detail") if isinstance(detail, dict) and "detail" in detail else "Invalid request."
        body: dict[str, Any] = {"code": code, "message": str(message)}
        if code == "invalid" and isinstance(detail, dict):
            body["fields"] = detail
        response.data = {"error": body}
    return response

