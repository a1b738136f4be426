"""How the OpenAPI schema (drf-spectacular) describes errors and auth.

Every operation documents the error shape of uploads/api_errors.py for the
answers any endpoint can give, added here once instead of on every view:
401 (no or bad credentials) where the view requires them, 403 (a session
request without its CSRF token) on writes, 400 and 415 (a malformed body or
an unsupported content type) where there is a body, 400 on paginated lists
(a bad cursor), 404 where the path names an object, and 429 everywhere (the
user's API rates: uploads/throttling.py; or a limit of their plan:
uploads/limits.py). Views add their own (409, 413, 422, ...) with `errors(...)`.
"""
from __future__ import annotations

from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework import serializers
from rest_framework.permissions import AllowAny


class ErrorBodySerializer(serializers.Serializer):
    code = serializers.CharField(help_text="For machines: stable, snake_case (e.g. `not_found`, `invalid`, "
                                           "`no_files`, `idempotency_key_reused`).")
    message = serializers.CharField(help_text="For people: what went wrong and what to do.")
    fields = serializers.DictField(
        required=False, child=serializers.ListField(child=serializers.CharField()),
        help_text="With code `invalid`: the problems per request field.")


class ErrorSerializer(serializers.Serializer):
    """Every error answer: `{"error": {"code", "message", ...}}`; some codes
    add fields of their own next to them (e.g. `files` with `file_too_large`)."""

    error = ErrorBodySerializer()


WHY = {
    400: "Bad input: a malformed body or parameter (`invalid` lists the fields), or a rule of the request.",
    401: "No credentials, or an unknown token: send `Authorization: Token <token>` or log in.",
    403: "A session (cookie) request that changes something without the `X-CSRFToken` header.",
    404: "No such object among yours (another user's objects are not found, never forbidden).",
    409: "The object is not in a state that allows this (e.g. cancel a finished job).",
    410: "Gone: the object expired or was given up.",
    413: "Too large: a file over the size limit, or more files than a request may carry.",
    415: "Unsupported Content-Type for this endpoint.",
    422: "The Idempotency-Key was used before with a different request.",
    429: "Too many: more requests a minute than your plan allows (`throttled`, with the `Retry-After` header and "
         "`retry_after` in seconds), or past a limit of your plan (`too_many_queued_jobs`, `too_many_endpoints`, "
         "`too_many_pending_uploads`, with `limit` and `count`). Nothing was done.",
}


def errors(*codes: int, **why: str) -> dict[int, OpenApiResponse]:
    """OpenAPI responses for error `codes`, each described by WHY or by a
    keyword `_<code>` (e.g. `_409="..."`)."""
    return {code: OpenApiResponse(ErrorSerializer, description=why.get(f"_{code}", WHY[code])) for code in codes}


class AutoSchema(SpectacularAutoSchema):
    def _get_response_bodies(self, direction: str = "response") -> dict:
        responses = super()._get_response_bodies(direction)
        common = []
        if not any(isinstance(p, AllowAny) for p in self.view.get_permissions()):
            common.append(401)
            if self.method not in ("GET", "HEAD", "OPTIONS"):
                common.append(403)
        if self.method in ("POST", "PUT", "PATCH") and self.get_request_serializer() is not None:
            common += [400, 415]
        elif self.method == "GET" and self._is_list_view() and self._get_paginator() is not None:
            common.append(400)  # a cursor this API did not give out
        if "{" in self.path:
            common.append(404)
        common.append(429)  # every view is throttled
        for code in common:
            if str(code) not in responses:
                responses[str(code)] = self._get_response_for_code(
                    OpenApiResponse(ErrorSerializer, description=WHY[code]), str(code), direction=direction)
        return responses

