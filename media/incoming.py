"""PUT /store/incoming/<token>: the FileSystemStorage stand-in for a
presigned UploadPart URL (media/direct.py). The token is the authority, as
a presigned URL's signature is: it names one part of one upload, its exact
size and an expiry, so the view needs no session, reads no database row and
holds no transaction while the body streams in."""
from __future__ import annotations

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from media import direct
from media.multipart import UploadGone


def _refused(status: int, code: str, message: str) -> JsonResponse:
    return JsonResponse({"error": {"code": code, "message": message}}, status=status)


@csrf_exempt  # the signed token is the credential; no cookie is involved
@require_http_methods(["PUT"])
def incoming_part(request: HttpRequest, token: str) -> HttpResponse:
    allowed = direct.incoming(token)
    if allowed is None:
        return _refused(403, "invalid_upload_url", "This upload URL is not valid or has expired; ask for a new one.")
    raw = (request.META.get("CONTENT_LENGTH") or "").strip()
    if not (raw.isascii() and raw.isdigit()):
        return _refused(411, "length_required", "Send the part with a Content-Length header.")
    try:
        part = direct.receive(allowed, request, int(raw))
    except UploadGone:
        return _refused(410, "upload_gone", "This upload is finished or was given up; it takes no more bytes.")
    except ValueError as exc:
        return _refused(400, "part_size_mismatch", str(exc))
    return HttpResponse(status=200, headers={"ETag": part.etag})
