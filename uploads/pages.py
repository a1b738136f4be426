"""HTML pages: the upload page (it talks to the JSON API from the browser) and a job's results."""
from __future__ import annotations

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie

from uploads import selectors
from uploads.delivery import output_url


@login_required
@ensure_csrf_cookie
def upload_page(request: HttpRequest) -> HttpResponse:
    return render(request, "uploads/upload_page.html", {"chunk_bytes": settings.FAIRLANE_RESUMABLE_CHUNK_BYTES})


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
                                                    "video_size": video_size})


@login_required
@ensure_csrf_cookie
def batch_page(request: HttpRequest, batch_id) -> HttpResponse:
    """One batch: its progress and estimate, its files (pages of 50), actions."""
    batch = selectors.batch_get_for_user(user=request.user, batch_id=batch_id)
    return render(request, "uploads/batch_page.html", {"batch": batch})
