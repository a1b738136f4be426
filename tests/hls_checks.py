"""What a player relies on in an HLS bundle, read from the files: each
rendition's segments as one stream (timestamps, keyframes, frames, MPEG-TS
continuity), the audio rendition's, and picture quality against a source
with ffmpeg's own psnr filter."""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import av

from transcoding.ffmpeg import FFMPEG

TS_PACKET = 188


def playlist_segments(playlist: Path) -> list[Path]:
    return [playlist.parent / line for line in playlist.read_text().splitlines() if line and not line.startswith("#")]


def joined(segments: list[Path], to: Path) -> Path:
    to.write_bytes(b"".join(p.read_bytes() for p in segments))
    return to


@dataclass
class StreamFacts:
    pts_s: list[float]  # every packet's presentation time, in order
    keyframes_s: list[float]
    decoded: int  # frames (video) or samples (audio) decoded without error
    errors: int

    @property
    def steps(self) -> set[float]:
        """The distinct gaps between consecutive timestamps (rounded to 0.1 ms)."""
        return {round(b - a, 4) for a, b in zip(self.pts_s, self.pts_s[1:])}


def stream_facts(path: Path, kind: str) -> StreamFacts:
    pts, keys = [], []
    with av.open(str(path)) as container:
        stream = container.streams.video[0] if kind == "video" else container.streams.audio[0]
        for packet in container.demux(stream):
            if packet.pts is None:
                continue
            pts.append(float(packet.pts * stream.time_base))
            if packet.is_keyframe:
                keys.append(pts[-1])
    decoded, errors = 0, 0
    with av.open(str(path)) as container:
        stream = container.streams.video[0] if kind == "video" else container.streams.audio[0]
        for frame in container.decode(stream):
            decoded += 1 if kind == "video" else frame.samples
    result = subprocess.run([FFMPEG, "-v", "error", "-i", str(path), "-f", "null", "-"], capture_output=True, text=True, check=False)
    errors = len(result.stderr.strip().splitlines()) + (result.returncode != 0)
    return StreamFacts(sorted(pts), sorted(keys), decoded, errors)


def continuity_breaks(path: Path) -> int:
    """How many MPEG-TS packets do not carry the continuity counter that
    follows their PID's previous one (ISO 13818-1 2.4.3.3)."""
    data = path.read_bytes()
    last: dict[int, int] = {}
    breaks = 0
    for at in range(0, len(data) - TS_PACKET + 1, TS_PACKET):
        pid = ((data[at + 1] & 0x1F) << 8) | data[at + 2]
        if pid == 0x1FFF:
            continue
        cc, has_payload = data[at + 3] & 0x0F, data[at + 3] & 0x10
        if pid in last:
            expected = (last[pid] + 1) & 0x0F if has_payload else last[pid]
            breaks += cc != expected
        last[pid] = cc
    return breaks


def master_audio_uri(master: Path) -> str | None:
    match = re.search(r'#EXT-X-MEDIA:TYPE=AUDIO,[^\n]*URI="([^"]+)"', master.read_text())
    return match.group(1) if match else None


def psnr(encoded: Path, source: Path, size: tuple[int, int]) -> float:
    """Average PSNR (dB, all planes) of `encoded` against `source` scaled to
    `size` the way the ladder scales it, frame by frame from the first."""
    graph = (f"[0:v]setpts=PTS-STARTPTS[e];[1:v]scale={size[0]}:{size[1]}:flags=bicubic,setsar=1,format=yuv420p,"
             f"setpts=PTS-STARTPTS[r];[e][r]psnr")
    result = subprocess.run([FFMPEG, "-hide_banner", "-i", str(encoded), "-i", str(source), "-lavfi", graph,
                             "-f", "null", "-"], capture_output=True, text=True, check=False)
    match = re.search(r"PSNR .* average:([0-9.]+|inf)", result.stderr)
    assert match, result.stderr[-2000:]
    return float(match.group(1))
