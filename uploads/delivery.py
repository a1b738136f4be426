"""Signed, expiring links to outputs. Files under MEDIA_ROOT are never served
by path: a link carries the output id signed with SECRET_KEY and a
timestamp, and stops working after FAIRLANE_URL_MAX_AGE_S."""
from __future__ import annotations

from django.conf import settings
from django.core import signing
from django.http import FileResponse, Http404, HttpRequest
from django.urls import reverse

from uploads.models import Output

_SALT = "fairlane.output"


def output_url(output: Output) -> str:
    token = signing.dumps(output.pk, salt=_SALT, compress=True)
    return reverse("output-download", args=[token])


def output_download(request: HttpRequest, token: str) -> FileResponse:
    try:
        output_id = signing.loads(token, salt=_SALT, max_age=settings.FAIRLANE_URL_MAX_AGE_S)
    except signing.BadSignature as exc:  # includes SignatureExpired
        raise Http404("Link invalid or expired.") from exc
    output = Output.objects.filter(pk=output_id).first()
    if output is None:
        raise Http404("Output not found.")
    response = FileResponse(output.file.open("rb"), content_type=output.content_type)
    response["Cache-Control"] = "private, max-age=300"
    response["X-Content-Type-Options"] = "nosniff"
    return response
