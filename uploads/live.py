"""Watching a video while it is processed: its growing HLS playlists, made
per request from what its running attempt has stored, behind a signed link
of their own (`/o/live/<token>/...`).

A video's attempt stores each segment as its encoder finishes it and
records, on its job's row, the segments every rendition has
(`Job.live`, transcoding/live.py): fenced by the attempt number, emptied
when an attempt starts. So the playlists here are always the current
attempt's, made from the database: a lost or replaced attempt's half
playlist is never served (its segments are under its own prefix, which no
playlist names any more, and its attempt tidies it away); the finished
outputs, recorded once when the job ends, take over from the live link.

- One pass: the job's own record; every rendition's segments carry the
  sound.
- Chunked (uploads/parts.py): the chunks' records in order, each stored
  under its own part's attempt prefix, up to the first chunk that is not
  done (the playlist stops where the video stops being contiguous); the
  sound, a rendition of its own, is the first chunk's.

Playlists are EVENT playlists without an end while the video is encoded
(players reload them every target duration and play on as they grow), and
with one as soon as its last segment is stored; once the job has
succeeded every request is redirected to the same file of the finished
HLS output (uploads/delivery.py). The master
lists the renditions that have segments (a ladder's are all written in
step, so all of them from the first), the middle one first as the
finished master does (transcoding/ladder.py).

Segment URIs are this link again (`<folder>/<job>/<attempt>/<segment>`),
answered only for a segment the job's (or its part's) current attempt has
recorded: on disk with the file, with object storage with a redirect to a
presigned URL of the store. Once the job has succeeded they are
redirected to the finished output's file of the same name (the bundle
keeps the names; a chunked video's parts' copies are deleted then), so a
player holding a playlist from before the end plays on.
"""
from __future__ import annotations

import math
import posixpath
import re
from dataclasses import dataclass

from django.conf import settings
from django.core import signing
from django.db.models import Q
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

import media
from uploads.delivery import output_path_url
from uploads.models import HLS_PLAYLIST, Job, Output

_SALT = "fairlane.live"
AUDIO_FOLDER = "audio"
# A live link outlives an output link by as long as a job may run: a
# player reloads the playlists of a growing video with the link it started
# with, however long the encode takes. What it serves is the job's state at
# each request, and nothing once the job has failed or been canceled.
LIVE_LINK_EXTRA_S = settings.FAIRLANE_TIME_LIMIT_MAX_S
# A segment link on disk: <folder>/<job id>/<attempt>/<file>.ts
_SEGMENT_PATH = re.compile(r"^(?P<folder>[0-9a-z]+)/(?P<job>[0-9a-f-]{36})/(?P<attempt>\d+)/(?P<name>seg_\d+\.ts)$")


@dataclass(frozen=True)
class Piece:
    """A run of segments stored under one attempt's prefix."""

    job_id: str
    attempt: int
    entries: list[tuple[str, float]]  # (segment file, seconds), in playing order
    complete: bool = False  # its encoder has ended: nothing more comes after these


@dataclass(frozen=True)
class Stream:
    """What of a video can be watched now: live (growing) or finished."""

    live: bool
    url: str  # the master playlist's link
    renditions: list[dict]  # name, width, height, max_kbps
    encoded_s: float
    duration_s: float
    video: tuple[Piece, ...] = ()
    audio: tuple[Piece, ...] = ()  # empty: the sound is in every rendition's segments
    audio_kbps: int = 0
    audio_channels: int = 2
    target_s: int = 4
    # The tracks' playlists end (EXT-X-ENDLIST): every segment there will be is listed.
    video_complete: bool = False
    audio_complete: bool = False


def _tracks(job: Job) -> dict:
    return (job.live or {}).get("tracks") or {}


def _piece(job: Job, track: str) -> Piece | None:
    entries = _tracks(job).get(track) or []
    return Piece(str(job.id), job.attempts, [(uri, float(d)) for uri, d in entries],
                 complete=bool((job.live or {}).get("complete"))) if entries else None


def _finished(job: Job) -> Stream | None:
    hls = next((o for o in job.outputs.all() if o.content_type == HLS_PLAYLIST), None)
    if hls is None:
        return None
    meta = hls.metadata or {}
    duration = float(meta.get("duration_s") or 0)
    return Stream(live=False, url=output_path_url(hls, "master.m3u8"), renditions=list(meta.get("renditions", [])),
                  encoded_s=duration, duration_s=duration)


def _chunked_pieces(job: Job) -> tuple[dict, list[Piece], list[Piece], bool]:
    """The first chunk's record (renditions, sound), the chunks' video pieces
    up to the first one not complete (the video stops where it stops being
    contiguous), the sound's piece, and whether the video is complete (every
    chunk's encoder has ended)."""
    chunks = list(Job.objects.filter(parent_id=job.id, part=Job.Part.CHUNK).order_by("part_index")
                  .only("id", "status", "attempts", "live", "part_index"))
    video: list[Piece] = []
    ended = False
    for chunk in chunks:
        piece = _piece(chunk, "video") if chunk.status in (Job.Status.RUNNING, Job.Status.SUCCEEDED) else None
        if piece is None:
            break
        video.append(piece)
        ended = piece.complete or chunk.status == Job.Status.SUCCEEDED
        if not ended:
            break
    first = chunks[0] if chunks else None
    audio = [p for p in [_piece(first, "audio")] if p is not None] if first is not None and video else []
    if audio and first.status == Job.Status.SUCCEEDED:
        audio = [Piece(audio[0].job_id, audio[0].attempt, audio[0].entries, complete=True)]
    whole = bool(chunks) and len(video) == len(chunks) and ended
    return (first.live if first is not None else {}), video, audio, whole


def stream_for(job: Job) -> Stream | None:
    """What of the job's video can be watched now; None when nothing can
    (not a video, nothing stored yet, ended without a ladder). A chunked
    video is live only with a plan whose first chunk makes the sound
    (transcoding/chunks.py): a plan stored before it has no live view."""
    if job.status == Job.Status.SUCCEEDED:
        return _finished(job)
    if job.status != Job.Status.RUNNING or job.kind != Job.Kind.VIDEO:
        return None
    plan = (job.media_info or {}).get("chunks")
    if plan is not None:
        if not plan.get("sound_in_first_chunk") and plan.get("has_audio"):
            return None
        info, video, audio, whole = _chunked_pieces(job)
        if not video or (plan.get("has_audio") and not audio):
            return None
    else:
        info, piece = job.live or {}, _piece(job, "video")
        if piece is None:
            return None
        video, audio, whole = [piece], [], piece.complete
    duration = float((job.media_info or {}).get("duration_s") or 0)
    # What plays is what both the picture and a separate sound have reached.
    encoded = min(sum(d for p in pieces for _, d in p.entries) for pieces in ([video, audio] if audio else [video]))
    return Stream(live=True, url=live_url(job, "master.m3u8"), renditions=list(info.get("renditions", [])),
                  encoded_s=round(encoded, 3), duration_s=duration,
                  video=tuple(video), audio=tuple(audio), audio_kbps=int(info.get("audio_kbps") or 0),
                  audio_channels=int(info.get("audio_channels") or 2), target_s=int(info.get("target_s") or 4),
                  video_complete=whole, audio_complete=bool(audio) and audio[-1].complete)


def live_url(job: Job, path: str) -> str:
    return reverse("live-stream", args=[signing.dumps(str(job.pk), salt=_SALT, compress=True), path])


# --- the playlists ------------------------------------------------------------------------


def master_playlist(stream: Stream) -> str:
    """The renditions with segments, the middle one first (players start with
    the first listed), the sound as its own rendition when it is one."""
    lines = ["#EXTM3U", "#EXT-X-VERSION:6", "#EXT-X-INDEPENDENT-SEGMENTS"]
    group = ""
    if stream.audio:
        lines.append(f'#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID="{AUDIO_FOLDER}",NAME="Audio",DEFAULT=YES,AUTOSELECT=YES,'
                     f'CHANNELS="{stream.audio_channels}",URI="{AUDIO_FOLDER}/index.m3u8"')
        group = f',AUDIO="{AUDIO_FOLDER}"'
    variants = [(f"#EXT-X-STREAM-INF:BANDWIDTH={(r['max_kbps'] + stream.audio_kbps) * 1000},"
                 f"RESOLUTION={r['width']}x{r['height']}{group}", f"{r['name']}/index.m3u8") for r in stream.renditions]
    if len(variants) > 1:
        variants.insert(0, variants.pop(len(variants) // 2))
    return "\n".join([*lines, *(line for variant in variants for line in variant)]) + "\n"


def media_playlist(stream: Stream, pieces: tuple[Piece, ...], folder: str, *, complete: bool) -> str:
    """An EVENT playlist of `pieces`' segments in `folder`, without an end
    until the track is `complete`: the player reloads it while the video
    grows. It ends as soon as the track's last segment is listed (in the same
    record, transcoding/live.py), before the job has ended: hls.js ends the
    stream (MediaSource.endOfStream, so the video can end) only on a last
    segment it loaded from a playlist that ended."""
    target = max([stream.target_s, *(math.ceil(d - 1e-3) for p in pieces for _, d in p.entries)])
    lines = ["#EXTM3U", "#EXT-X-VERSION:3", f"#EXT-X-TARGETDURATION:{target}", "#EXT-X-MEDIA-SEQUENCE:0",
             "#EXT-X-PLAYLIST-TYPE:EVENT", "#EXT-X-INDEPENDENT-SEGMENTS"]
    for piece in pieces:
        for name, seconds in piece.entries:
            lines += [f"#EXTINF:{seconds:.6f},", f"{piece.job_id}/{piece.attempt}/{name}"]
    if complete:
        lines.append("#EXT-X-ENDLIST")
    return "\n".join(lines) + "\n"


# --- the link -----------------------------------------------------------------------------


def _linked_job(token: str) -> Job:
    try:
        job_id = signing.loads(token, salt=_SALT, max_age=settings.FAIRLANE_URL_MAX_AGE_S + LIVE_LINK_EXTRA_S)
    except signing.BadSignature as exc:  # includes SignatureExpired
        raise Http404("Link invalid or expired.") from exc
    job = Job.objects.filter(pk=job_id).prefetch_related("outputs").first()
    if job is None:
        raise Http404("Not found.")
    return job


def _no_store(response: HttpResponse) -> HttpResponse:
    response["Cache-Control"] = "private, no-store"  # it changes, and may hold URLs that expire
    response["X-Content-Type-Options"] = "nosniff"
    return response


def _segment(job: Job, path: str, finished: Output | None) -> HttpResponse:
    """A segment the job's (or one of its parts') current attempt has
    recorded; once the job has succeeded, the finished output's file of
    that name."""
    match = _SEGMENT_PATH.match(path)
    if match is None:
        raise Http404("Not part of this video.")
    folder, name = match["folder"], match["name"]
    if finished is not None:
        return HttpResponseRedirect(output_path_url(finished, f"{folder}/{name}"))
    owner = Job.objects.filter(Q(id=job.id) | Q(parent_id=job.id), id=match["job"]).first()
    if owner is None or owner.attempts != int(match["attempt"]) or owner.status not in (
            Job.Status.RUNNING, Job.Status.SUCCEEDED):
        raise Http404("Not part of this video.")
    track = "audio" if folder == AUDIO_FOLDER else "video"
    if name not in {uri for uri, _ in (_tracks(owner).get(track) or [])}:
        raise Http404("Not part of this video.")
    key = f"{media.outputs_prefix(job_id=str(owner.id), attempt=owner.attempts)}hls/{folder}/{name}"
    expires = settings.FAIRLANE_URL_MAX_AGE_S
    url = media.presigned_url(key, expires_s=expires, content_type=media.content_type_for(key))
    response = (HttpResponseRedirect(url) if url
                else FileResponse(media.open_file(key), content_type=media.content_type_for(key)))
    response["Cache-Control"] = "private, max-age=300" if url is None else "private, no-store"
    response["X-Content-Type-Options"] = "nosniff"
    return response


def live_stream(request: HttpRequest, token: str, path: str) -> HttpResponse:
    """GET /o/live/<token>/<path>: the growing playlists of the linked
    video while it runs (and its segments, on disk), the finished output's
    same file once it has succeeded, 404 otherwise."""
    job = _linked_job(token)
    if job.status == Job.Status.SUCCEEDED:
        finished = next((o for o in job.outputs.all() if o.content_type == HLS_PLAYLIST), None)
        if finished is None:
            raise Http404("Not part of this video.")
        if path.endswith(".m3u8"):
            return _no_store(HttpResponseRedirect(output_path_url(finished, path)))
        return _segment(job, posixpath.normpath(path), finished)
    stream = stream_for(job)
    if stream is None or not stream.live:
        raise Http404("Nothing to play yet.")
    if path == "master.m3u8":
        return _no_store(HttpResponse(master_playlist(stream), content_type=HLS_PLAYLIST))
    folder, _, name = path.partition("/")
    if name == "index.m3u8":
        if folder == AUDIO_FOLDER and stream.audio:
            return _no_store(HttpResponse(media_playlist(stream, stream.audio, folder, complete=stream.audio_complete),
                                            content_type=HLS_PLAYLIST))
        if folder in {r["name"] for r in stream.renditions}:
            return _no_store(HttpResponse(media_playlist(stream, stream.video, folder, complete=stream.video_complete),
                                            content_type=HLS_PLAYLIST))
        raise Http404("Not part of this video.")
    return _segment(job, posixpath.normpath(path), None)
