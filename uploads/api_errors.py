"""Every API error has the same shape: {"error": {"code", "message", ...}}.

`exception_handler` is DRF's (settings.REST_FRAMEWORK) for errors inside an
API view; `not_found` and `server_error` are Django's handler404/handler500
(project/urls.py), so a URL under /api/ that matches no route, or a bug,
answers in the same shape instead of an HTML page.
"""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, SuspiciousOperation, TooManyFieldsSent, TooManyFilesSent
from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

import media
from uploads import throttling
from uploads.errors import ApplicationError


def _request_errors() -> dict[type[Exception], ApplicationError]:
    """Django refuses some requests while parsing their body, before any
    view code runs; these are the client's fault, not 500s."""
    return {
        TooManyFilesSent: ApplicationError(
            "too_many_files", f"A request may carry at most {settings.DATA_UPLOAD_MAX_NUMBER_FILES} files; "
            "send them in several requests.", status_code=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE),
        TooManyFieldsSent: ApplicationError(
            "too_many_fields", f"A request may carry at most {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} fields."),
        RequestDataTooBig: ApplicationError(
            "request_too_large", "The request body is larger than this endpoint accepts.",
            status_code=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE),
        # Not the client's fault, but not a bug either: the store is down or
        # busy, the request changed nothing (an upload's rows roll back and
        # what was stored is removed), and the same request may be sent again.
        media.StorageUnavailable: ApplicationError(
            "storage_unavailable", "File storage is unavailable at the moment; nothing was stored. "
            "Try again in a minute.", status_code=status.HTTP_503_SERVICE_UNAVAILABLE),
    }


def _as_application_error(exc: Exception) -> ApplicationError | None:
    if isinstance(exc, ApplicationError):
        return exc
    for kind, error in _request_errors().items():
        if isinstance(exc, kind):
            return error
    if isinstance(exc, SuspiciousOperation):
        return ApplicationError("bad_request", "The request was refused as malformed.")
    if isinstance(exc, DjangoValidationError):  # a lookup with a value of the wrong type, say
        return ApplicationError("invalid", " ".join(exc.messages) or "Invalid request.")
    return None


def _message(detail: Any) -> str:
    if isinstance(detail, dict) and "detail" in detail:
        return str(detail["detail"])
    if isinstance(detail, list) and detail:
        return " ".join(str(item) for item in detail)
    return "Invalid request."


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    app_error = _as_application_error(exc)
    if app_error is not None:
        body = {"code": app_error.code, "message": app_error.message, **app_error.extra}
        return Response({"error": body}, status=app_error.status_code)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    response = drf_exception_handler(exc, context)
    if response is None:
        return None
    detail = response.data
    if isinstance(exc, exceptions.APIException):
        codes = exc.get_codes()
        code = codes if isinstance(codes, str) else "invalid"
        body: dict[str, Any] = {"code": code, "message": _message(detail)}
        if code == "invalid" and isinstance(detail, dict):
            body["fields"] = detail
        if isinstance(exc, exceptions.Throttled):  # DRF set Retry-After to exc.wait, whole seconds
            refusal = getattr(context.get("request"), "throttle_refusal", None)
            body.update(throttling.refusal_details(refusal, exc.wait))
        response.data = {"error": body}
    return response


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler404: JSON under /api/ (an unknown URL or a malformed id in it)."""
    if _is_api(request):
        return JsonResponse({"error": {"code": "not_found", "message": "No such resource."}}, status=404)
    return defaults.page_not_found(request, exception)


def bad_request(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler400: what Django refused before a view ran (e.g. too many files
    in a multipart body parsed by middleware), in the API's shape under /api/."""
    if _is_api(request):
        error = _as_application_error(exception) or ApplicationError("bad_request", "Malformed request.")
        return JsonResponse({"error": {"code": error.code, "message": error.message}}, status=error.status_code)
    return defaults.bad_request(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: a bug. Logged by Django; the client learns only that."""
    if _is_api(request):
        return JsonResponse({"error": {"code": "internal_error",
                                       "message": "Something went wrong on our side; it has been logged."}},
                            status=500)
    return defaults.server_error(request)
