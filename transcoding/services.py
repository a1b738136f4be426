"""Transcode one job: copy its input to a private scratch folder, probe, run
the pipeline for its kind there, upload the outputs under the attempt's
own prefix; the database transition publishes them. Claiming, leases, retries and
failures are uploads/attempts.py's: a media error (MediaError) fails the job
with its code and touches nothing else.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import posixpath
import signal
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from django.conf import settings

import media
from transcoding import chunks, ladder, live, pipelines, streamed
from transcoding.probe import Probe, probe_file, probe_header
from transcoding.produced import Produced
from transcoding.scan_notes import note_passed, probe_noted
from uploads import parts
from uploads import services as job_services
from uploads.attempts import Attempt, AttemptLost, job_attempt_run
from uploads.errors import JobError
from uploads.models import Job, Output
from uploads.services import OutputFile

log = logging.getLogger(__name__)

# Estimated worker seconds per second of media, by kind, for the fair
# dispatcher's charge (corrected afterwards by the measured run time). Video
# is the ladder from a 1080p source (bench/media.py: about 1.6 s of wall time
# per media second on an idle 2-core machine), scaled down by frame size.
COST_PER_MEDIA_SECOND = {"video": 1.6, "audio": 0.05}
COST_FLAT = {"image": 0.3, "pdf": 0.3}


def cost_estimate(probe: Probe) -> float:
    per_second = COST_PER_MEDIA_SECOND.get(probe.kind, 0.0)
    if probe.kind == "video":
        per_second *= max(0.1, min(1.0, (probe.width or 0) * (probe.height or 0) / ladder.FULL_HD_PIXELS))
    return max(0.05, COST_FLAT.get(probe.kind, 0.0) + per_second * probe.duration_s)


# Fault injection (tests/chaos, FAIRLANE_FAULT_INJECTION only): a file that
# starts with this kills the process that opens it, every time, as a file
# that crashes or exhausts its worker would.
FAULT_POISON_MARKER = b"FAIRLANE-POISON-PILL"


def _poison_check(src: Path) -> None:
    if settings.FAIRLANE_FAULT_INJECTION:
        with open(src, "rb") as f:
            if f.read(len(FAULT_POISON_MARKER)) == FAULT_POISON_MARKER:
                log.warning("fault injection: poison pill %s kills worker process %d", src, os.getpid())
                os.kill(os.getpid(), signal.SIGKILL)


def transcode(attempt: Attempt, then: Callable[[str], None] = lambda part_id: None) -> list[OutputFile] | None:
    """The work of one attempt (uploads/attempts.py runs it): copy the input
    into the attempt's scratch folder, probe, check the limits, run the
    pipeline for the kind there, and upload what it made under the
    attempt's own prefix. Publishing is the database transition's
    (job_succeed); the scratch folder goes on every way out.

    The input is copied rather than read by ffmpeg through a presigned URL:
    the probe and the ladder read it several times (and seek for the
    poster), a copy is bounded by the upload limit and fetched in parallel
    ranges, and ffmpeg keeps to local files and pipes, never the network. A
    large MP4 on object storage is read while the copy arrives: its split
    probes the header and its first chunk and sound read a pipe fed from
    what has come (transcoding/streamed.py). `then`: told the id of a part of the job to run next in this
    slot (the first chunk of a video it split)."""
    job, job_id = attempt.job, str(attempt.job.id)
    started = time.monotonic()
    with media.attempt_scratch(job_id=job_id, attempt=attempt.number) as scratch, ExitStack() as cleanup:
        workdir = scratch / "out"
        workdir.mkdir()
        if job.part == Job.Part.FINALIZE:
            return _finalize(attempt, scratch, workdir)
        src, key = scratch / "input", (job.parent or job).upload.file.name
        stream = _input(job, key, src)
        if stream is not None:  # paced until its first frames are out (media.Growing.release), never longer
            cleanup.callback(stream.growing.release)
        fetched = time.monotonic()
        _poison_check(src)
        # also refuses media above the size and duration limits
        probe = _probe(key, src, stream, part=bool(job.parent_id))
        # The progress write doubles as the stop check: when the job is no
        # longer this attempt's (canceled, handed back, taken over) it
        # raises, which kills ffmpeg's process group (transcoding/ffmpeg.py).
        sink = _sink(attempt, on_playable=stream.growing.release if stream is not None else None)
        if job.parent_id:
            produced = _part_encode(job, src, workdir, probe, attempt.progress, sink, stream)
        else:
            job_services.job_probe_record(job_id=job_id, kind=probe.kind, media_info=probe.as_json(),
                                          cost_estimate=cost_estimate(probe))
            if chunks.should_chunk(probe):
                if stream is None:  # for the parts that run on this host: the input and its scan
                    media.keep_input(key, src)
                    note_passed(key, probe)
                _split(attempt, probe, then)
                if stream is not None:  # the cache gets it as it arrives; the first chunk reads it meanwhile
                    streamed.hand_over(key, dataclasses.replace(stream, probe=probe))
                    cleanup.pop_all()  # its release is the first chunk's now
                return None
            if probe.kind == "video":
                produced = pipelines.video(src, workdir, probe, attempt.progress, sink=sink)
            else:
                produced = pipelines.PIPELINES[probe.kind](src, workdir, probe, attempt.progress)
        encoded = time.monotonic()
        attempt.progress(99)  # still ours? then upload (a replaced attempt stops here)
        prefix = attempt.outputs_prefix
        sizes = media.put_tree(workdir, prefix, skip=sink.stored)
        outputs = [OutputFile(name=p.name, path=prefix + p.filename, content_type=p.content_type,
                              size=sizes[p.filename], metadata=p.metadata) for p in produced]
        log.info("job %s transcoded: %s, %d outputs in %.2f s (fetch %.3f s, upload %.3f s)", job_id, probe.kind,
                 len(outputs), time.monotonic() - started, fetched - started, time.monotonic() - encoded)
        return outputs


def _input(job: Job, key: str, src: Path) -> streamed.Streamed | None:
    """Put the job's input at `src`. A video's first chunk reads what its
    split is still fetching in this slot (transcoding/streamed.py), which it
    returns; another part takes the host's cached copy (waiting for a fetch
    under way); a whole upload starts streaming when it can be read as it
    arrives (returned: probed from its header), else is fetched whole."""
    if job.parent_id:
        stream = streamed.take(key) if job.part == Job.Part.CHUNK and job.part_index == 0 else None
        if stream is None:
            media.fetch_input(key, src)
        else:
            stream.growing.link(src)
            log.info("job %s: its first chunk reads the source as it arrives", job.parent_id)
        return stream
    recorded = job.upload.size
    stream = streamed.start(key, src, recorded_size=recorded)
    if stream is None:
        media.fetch(key, src, read_only=True, size=recorded)
    return stream


def _probe(key: str, src: Path, stream: streamed.Streamed | None, *, part: bool) -> Probe:
    """The input's probe: a streamed video's from its header when it will
    be split (the split hands it to its first chunk with the stream), else
    the whole file's, once there; a part's, once per host (scan_notes)."""
    if stream is not None and stream.probe is not None:
        return stream.probe
    if stream is not None:
        stream.wait_head()
        probe = probe_header(src)
        if probe is not None and chunks.should_chunk(probe):
            return probe
        stream.growing.wait_all()
    return probe_noted(key, src) if part else probe_file(src)


def _sink(attempt: Attempt, *, on_playable: Callable[[], None] | None = None) -> live.Sink:
    """Where the attempt's video segments go while it encodes (its outputs
    prefix), and the fenced write of what is stored (transcoding/live.py);
    `on_playable` is told once the job is playable."""
    def record(state: dict, playable: bool) -> None:
        if not job_services.job_live_record(job_id=str(attempt.job.id), attempt=attempt.number, live=state,
                                            playable=playable):
            raise AttemptLost(str(attempt.job.id))
        if playable and on_playable is not None:
            on_playable()

    return live.Sink(prefix=attempt.outputs_prefix, record=record)


def _split(attempt: Attempt, probe: Probe, then: Callable[[str], None]) -> None:
    """Hand a long video to its parts (uploads/parts.py): chunks charged by
    their share of the video's cost, the sound by its own (the first
    chunk's, which makes it). The first chunk is kept for this delivery
    (`then`): it runs in this slot as soon as the split is committed, on
    this host, which has the source and has just probed it, so the first
    frames never wait for a dispatch, another host's download of the
    source or another probe; the other parts go to the dispatcher."""
    plan = chunks.plan_for(probe)
    total = cost_estimate(probe)
    chunk_costs = [max(0.05, total * plan.chunk_duration_s(i) / probe.duration_s) for i in range(len(plan.chunks))]
    sound_cost = max(0.05, COST_PER_MEDIA_SECOND["audio"] * probe.duration_s) if plan.has_audio else None
    if plan.sound_in_first_chunk and sound_cost:
        chunk_costs[0] += sound_cost
        sound_cost = None
    first = parts.job_split(job_id=str(attempt.job.id), attempt=attempt.number, plan=plan.as_json(),
                            chunk_costs=chunk_costs, audio_cost=sound_cost, keep_first=True)
    if not first:
        raise AttemptLost(str(attempt.job.id))
    then(first)


def _part_encode(job: Job, src: Path, workdir: Path, probe: Probe, on_progress, sink: live.Sink,
                 stream: streamed.Streamed | None) -> list[Produced]:
    plan = chunks.ChunkPlan.from_json(job.parent.media_info["chunks"])
    if job.part == Job.Part.AUDIO:
        return chunks.encode_audio(src, workdir, probe, plan, on_progress)
    if stream is not None:  # the first chunk, reading its source as it arrives, scanned beside it
        return streamed.encode_scanned(stream, src, lambda check: chunks.encode_chunk(
            None, workdir, probe, plan, job.part_index, on_progress, sink=sink, feed=stream.feed,
            sound_feed=stream.follow, check=check))
    return chunks.encode_chunk(src, workdir, probe, plan, job.part_index, on_progress, sink=sink)


def _finalize(attempt: Attempt, scratch: Path, workdir: Path) -> list[OutputFile]:
    """The finalizer: fetch every part's segments into one HLS folder, write
    the playlists, remux the MP4, upload the whole under this attempt's
    prefix (the segments are copied: an HLS output is one folder, see
    uploads/delivery.py)."""
    job = attempt.job
    started = time.monotonic()
    plan = chunks.ChunkPlan.from_json(job.parent.media_info["chunks"])
    chunk_outputs, audio, poster = parts.part_outputs(parent_id=str(job.parent_id))
    if len(chunk_outputs) != len(plan.chunks) or poster is None or (plan.has_audio and audio is None):
        raise JobError("internal_error", "A part of the video is missing its outputs.")
    hls = workdir / "hls"
    playlists = [scratch / "parts" / str(output.job.part_index) for output in chunk_outputs]
    wanted = [pair for output, folder in zip(chunk_outputs, playlists) for pair in _hls_files(output, hls, folder)]
    if audio is not None and audio.job.part == Job.Part.AUDIO:  # else the first chunk's folder holds it
        wanted += _hls_files(audio, hls, hls)
    media.fetch_many([*wanted, (poster.file.name, workdir / "poster.jpg")])
    if audio is not None and audio.job.part == Job.Part.CHUNK:
        (playlists[0] / chunks.AUDIO_GROUP / "index.m3u8").replace(hls / chunks.AUDIO_GROUP / "index.m3u8")
    fetched = time.monotonic()
    attempt.progress(30)
    produced = chunks.finalize(hls, playlists, workdir, scratch, plan, attempt.progress)
    attempt.progress(99)
    prefix = attempt.outputs_prefix
    sizes = media.put_tree(workdir, prefix)
    log.info("job %s finalized %d chunks in %.2f s (fetch %.3f s)", job.parent_id, len(plan.chunks),
             time.monotonic() - started, fetched - started)
    return [OutputFile(name=p.name, path=prefix + p.filename, content_type=p.content_type,
                       size=sizes[p.filename], metadata=p.metadata) for p in produced]


def _hls_files(output: Output, hls: Path, playlists: Path) -> list[tuple[str, Path]]:
    """(key, local path) of a part's HLS folder (the folder above its
    playlist's rendition folder): segments into `hls`, playlists into
    `playlists`."""
    root = posixpath.dirname(posixpath.dirname(output.file.name)) + "/"
    return [(key, (playlists if key.endswith(".m3u8") else hls) / key[len(root):]) for key in media.list_prefix(root)]


def job_transcode(*, job_id: str, hostname: str = "", soft_limit_s: float | None = None,
                  task_id: str = "") -> str | None:
    """Run one delivery of a transcode job; see uploads.attempts.job_attempt_run.
    When it split a long video, its first chunk runs next, here (_split):
    an attempt of its own, with its own lease, retried through the
    dispatcher if it fails transiently; what the delivery reports is the
    job's (the slot's time, the first chunk's included, is charged to the
    owner when the task finishes)."""
    then: list[str] = []
    result = job_attempt_run(job_id=job_id, hostname=hostname, soft_limit_s=soft_limit_s,
                             work=lambda attempt: transcode(attempt, then.append), task_id=task_id)
    for part_id in then:
        job_attempt_run(job_id=part_id, hostname=hostname, soft_limit_s=soft_limit_s, work=transcode)
    return result
