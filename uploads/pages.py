"""HTML pages: the upload page (it talks to the JSON API from the browser) and a job's results."""
from __future__ import annotations

from pathlib import Path

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_cache_control
from django.views.decorators.csrf import ensure_csrf_cookie
from django.views.decorators.http import require_http_methods

from uploads import accounts, facts, live, selectors
from uploads.delivery import output_url
from uploads.models import Batch, Job


@login_required
@ensure_csrf_cookie
def upload_page(request: HttpRequest) -> HttpResponse:
    return render(request, "uploads/upload_page.html")


@login_required
@ensure_csrf_cookie
def job_page(request: HttpRequest, job_id) -> HttpResponse:
    """One job's results: the video in its player (quality menu, scrub
    previews), images, audio and documents, through signed links; the
    facts about the file and its outputs; and what may be done to it."""
    job = selectors.job_get_for_user(user=request.user, job_id=job_id)
    outputs = list(job.outputs.all())
    links = {output.name: output_url(output) for output in outputs}
    listed = [{"label": o.label, "url": links[o.name], "type": o.content_type,
               "size": "" if o.bundle_folder else facts.bytes_text(o.size)} for o in outputs]
    # A video still being processed plays from its growing playlists
    # (uploads/live.py) as soon as it has some: the page asks the API until
    # then, and what it might become is unknown until the probe.
    unfinished = job.status in (Job.Status.QUEUED, Job.Status.RUNNING)
    stream = live.stream_for(job) if unfinished else None
    # The player's box takes the video's shape before anything has loaded
    # (and keeps it while the ladder switches renditions), sized to fit the
    # window whatever the orientation.
    video = next((o.metadata for o in outputs if o.name in ("mp4", "hls") and o.metadata.get("height")), None)
    video = video or (stream.renditions[-1] if stream and stream.renditions else None)
    video_size = {"width": video["width"], "height": video["height"]} if video else None
    return render(request, "uploads/job_page.html", {
        "job": job, "links": links, "outputs": listed, "video_size": video_size, "still": _still(links),
        "facts": facts.job_facts(job, outputs), "actions": _job_actions(job), "stream": stream,
        "growing": unfinished and job.kind in (Job.Kind.VIDEO, Job.Kind.UNKNOWN),
        "duration_s": (job.media_info or {}).get("duration_s") or "", "batch": _batch(job)})


def _batch(job: Job) -> dict | None:
    """The batch the job's file came in, and how far along it is."""
    if not job.upload_id:
        return None
    batch = Batch.objects.filter(id=job.upload.batch).first()
    progress = selectors.batches_progress(owner_id=job.owner_id, batch_ids=[job.upload.batch])[job.upload.batch]
    return {"id": job.upload.batch, "name": batch.display_name if batch else "its batch",
            "done": progress.files - progress.unfinished, "files": progress.files}


def _job_actions(job) -> list[str]:
    """What the page offers for the job in its state: as the file list's
    buttons (and the API's rules: cancel while unfinished, retry once it
    failed or was canceled, delete always)."""
    if job.status in (Job.Status.QUEUED, Job.Status.RUNNING):
        return ["cancel", "delete"]
    if job.status in (Job.Status.FAILED, Job.Status.CANCELED):
        return ["retry", "delete"]
    return ["delete"]


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
    """One batch: its name (renamed here), progress and estimate, its
    exports (a button, their progress and ZIP), its files (pages of 50),
    actions."""
    batch = selectors.batch_get_for_user(user=request.user, batch_id=batch_id)
    return render(request, "uploads/batch_page.html", {"batch": batch, "name_max_length": Batch.NAME_MAX_LENGTH})


@login_required
@require_http_methods(["GET", "POST"])
def api_token_page(request: HttpRequest) -> HttpResponse:
    """See whether you have an API token and since when; create or rotate
    it (POST). The token itself is shown only in the answer that made it,
    which no cache or back button keeps."""
    made = accounts.api_token_rotate(user=request.user) if request.method == "POST" else None
    token = made or selectors.api_token_for_user(user=request.user)
    response = render(request, "uploads/api_token.html", {"token": token, "made": made is not None})
    if made is not None:
        patch_cache_control(response, no_store=True)
    return response


FAVICON = Path(__file__).resolve().parent / "static" / "uploads" / "favicon.ico"


def favicon(request: HttpRequest) -> HttpResponse:
    """/favicon.ico, which browsers ask for on every page that names no icon
    (the admin, Swagger UI, error pages); ours name the SVG beside it."""
    response = HttpResponse(FAVICON.read_bytes(), content_type="image/x-icon")
    response["Cache-Control"] = "public, max-age=86400"
    return response
