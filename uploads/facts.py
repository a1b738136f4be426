"""What a job's page says about its file, in words a person reads: the
facts the probe found (stored on the job, `Job.media_info`), the upload's
size, and what each output is (its renditions, sizes and bitrates), with
durations, sizes and rates in human units ("3 min 0 s", "12.4 MB",
"1,450 kbit/s"). The upload page's lists format waits the same way in the
browser (uploads/static/uploads/pages.js, `fairlane.duration`)."""
from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from uploads.models import Job, Output


def duration_text(seconds: float | None) -> str:
    """"850 ms", "4.2 s", "42 s", "3 min 0 s", "1 h 2 min": precise where
    a difference is felt, round where it is not."""
    if seconds is None:
        return ""
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds < 10:
        return f"{seconds:.1f} s"
    whole = round(seconds)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole // 60 % 60} min"


def bytes_text(size: int | None) -> str:
    """Decimal units, as file managers and browsers' downloads show them."""
    if size is None:
        return ""
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def rate_text(kbps: float | None) -> str:
    return "" if kbps is None else f"{round(kbps):,} kbit/s"


@dataclass(frozen=True)
class Rendition:
    name: str
    resolution: str  # "640×360"
    bitrate: str
    size: str


@dataclass(frozen=True)
class Facts:
    rows: list[tuple[str, str]]  # (what, value), in reading order
    renditions: list[Rendition]


def _display_size(info: dict) -> tuple[int, int] | None:
    """What a viewer sees (square pixels, rotation applied), as the probe's
    Probe.display_size computes it, from its stored fields."""
    width, height = info.get("width"), info.get("height")
    if not width or not height:
        return None
    aspect = str(info.get("sample_aspect") or "1:1")
    sar = Fraction(aspect.replace(":", "/")) if aspect not in ("0:1", "") else Fraction(1)
    width = round(width * (sar or 1))
    return (height, width) if int(info.get("rotation") or 0) % 180 == 90 else (width, height)


def _codecs(info: dict) -> str:
    parts = []
    for stream in info.get("streams") or []:
        if stream.get("type") == "video":
            parts.append(f"{stream.get('codec')} video")
        elif stream.get("type") == "audio":
            detail = [f"{stream['channels']} ch"] if stream.get("channels") else []
            detail += [f"{stream['sample_rate'] / 1000:g} kHz"] if stream.get("sample_rate") else []
            parts.append(f"{stream.get('codec')} audio" + (f" ({', '.join(detail)})" if detail else ""))
    return ", ".join(parts)


def job_facts(job: Job, outputs: list[Output]) -> Facts:
    """The facts panel of a job's page; only what is known (a job that
    failed before its probe has its file's name and size)."""
    info = job.media_info or {}
    rows: list[tuple[str, str]] = [("Kind", job.kind)]
    if job.upload_id:
        rows.append(("File size", bytes_text(job.upload.size)))
    if info.get("duration_s") and job.kind in (Job.Kind.VIDEO, Job.Kind.AUDIO):
        rows.append(("Duration", duration_text(float(info["duration_s"]))))
    if (size := _display_size(info)) is not None:
        rows.append(("Resolution", f"{size[0]}×{size[1]}"))
    if info.get("fps") and job.kind == Job.Kind.VIDEO:
        rows.append(("Frame rate", f"{float(info['fps']):.4g} fps" + (" (variable)" if info.get("vfr") else "")))
    if codecs := _codecs(info):
        rows.append(("Codecs", codecs))
    if info.get("container"):
        rows.append(("Container", str(info["container"])))
    pages = next((o.metadata.get("pages") for o in outputs if o.metadata.get("pages")), None)
    if pages:
        rows.append(("Pages", str(pages)))
    if job.wait_ms is not None:
        rows.append(("Waited", duration_text(job.wait_ms / 1000)))
    if job.playable_at is not None:  # from the upload's acceptance to its first seconds playing (uploads/live.py)
        rows.append(("Playable after", duration_text((job.playable_at - job.created_at).total_seconds())))
    if job.process_ms is not None:
        rows.append(("Processed in", duration_text(job.process_ms / 1000)))
    return Facts(rows, _renditions(outputs))


def _renditions(outputs: list[Output]) -> list[Rendition]:
    """The HLS ladder's renditions, largest first, with the bitrate measured
    from their segments (the size follows from it and the duration; the
    output row's own size is its master playlist's)."""
    hls = next((o for o in outputs if o.name == "hls"), None)
    if hls is None:
        return []
    duration = float(hls.metadata.get("duration_s") or 0)
    return [Rendition(r["name"], f"{r['width']}×{r['height']}", rate_text(r.get("kbps")),
                      bytes_text(round(r["kbps"] * 125 * duration)) if r.get("kbps") else "")
            for r in reversed(hls.metadata.get("renditions", []))]
