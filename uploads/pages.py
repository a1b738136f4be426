"""HTML pages: the upload page (it talks to the JSON API from the browser) and a job's results."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie

from uploads import selectors
from uploads.delivery import output_url


@login_required
@ensure_csrf_cookie
def upload_page(request: HttpRequest) -> HttpResponse:
    return render(request, "uploads/upload_page.html")


@login_required
def job_page(request: HttpRequest, job_id) -> HttpResponse:
    """One job's results: the video (HLS where the browser plays it natively,
    else the MP4), images, audio and documents, through signed links."""
    job = selectors.job_get_for_user(user=request.user, job_id=job_id)
    outputs = list(job.outputs.all())
    links = {output.name: output_url(output) for output in outputs}
    labelled = [(output.label, links[output.name]) for output in outputs]
    # The player's box takes the video's shape before anything has loaded
    # (and keeps it while the ladder switches renditions), sized to fit the
    # window whatever the orientation.
    video = next((o.metadata for o in outputs if o.name in ("mp4", "hls") and o.metadata.get("height")), None)
    video_size = {"width": video["width"], "height": video["height"]} if video else None
    return render(request, "uploads/job_page.html", {"job": job, "links": links, "labelled": labelled,
                                                    "video_size": video_size, "still": _still(links)})


# The still pictures a job may have, largest first: an image's three sizes
# (each in WebP with a JPEG beside it, transcoding/images.py), a PDF's one
# WebP thumbnail (transcoding/pipelines.py).
STILLS = ("large", "medium", "thumbnail")


def _still(links: dict[str, str]) -> dict[str, str | None] | None:
    """The largest still picture there is: its WebP, and its JPEG for
    browsers without WebP when there is one. Chosen here, not with chained
    `default:` filters in the template: a filter argument that names a
    missing output (`links.medium` of a PDF) is an error there, not a blank."""
    name = next((name for name in STILLS if name in links), None)
    return {"webp": links[name], "jpeg": links.get(f"{name}_jpeg")} if name else None


@login_required
@ensure_csrf_cookie
def batch_page(request: HttpRequest, batch_id) -> HttpResponse:
    """One batch: its progress and estimate, its files (pages of 50), actions."""
    batch = selectors.batch_get_for_user(user=request.user, batch_id=batch_id)
    return render(request, "uploads/batch_page.html", {"batch": batch})
