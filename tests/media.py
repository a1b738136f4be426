"""Test media made with the real ffmpeg and Pillow, small enough to be quick,
and a real probe (PyAV, ffmpeg) to check what the pipelines made."""
from __future__ import annotations

import subprocess
from pathlib import Path

import av
import imageio_ffmpeg

FFMPEG = imageio_ffmpeg.get_ffmpeg_exe()


def ffmpeg(*args: str) -> None:
    subprocess.run([FFMPEG, "-v", "error", "-y", *args], check=True)


def make_video(
    path: Path,
    *,
    seconds: float = 1.0,
    size: str = "160x120",
    audio: bool = True,
    rate: int = 25,
    audio_tracks: int = 1,
    vf: str | None = None,
    video_args: tuple[str, ...] = ("-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"),
    audio_args: tuple[str, ...] = ("-c:a", "aac"),
) -> Path:
    """testsrc2 (moving, so every frame differs) with sine tones, one per
    audio track at different pitches."""
    args = ["-f", "lavfi", "-i", f"testsrc2=size={size}:rate={rate}:duration={seconds}"]
    for track in range(audio_tracks if audio else 0):
        args += ["-f", "lavfi", "-i", f"sine=frequency={440 * (track + 1)}:duration={seconds}"]
    args += ["-map", "0:v"] + [arg for t in range(audio_tracks if audio else 0) for arg in ("-map", f"{t + 1}:a")]
    if audio:
        args += [*audio_args, "-shortest"]
    if vf:
        args += ["-vf", vf]
    ffmpeg(*args, *video_args, str(path))
    return path


def rotated(src: Path, dst: Path, degrees: int) -> Path:
    """The same stream with a display matrix, as phones write portrait video."""
    ffmpeg("-display_rotation", str(degrees), "-i", str(src), "-c", "copy", str(dst))
    return dst


def probe_output(path: Path) -> str:
    """ffmpeg's own description of a file's streams (ffprobe is not shipped)."""
    result = subprocess.run([FFMPEG, "-hide_banner", "-i", str(path)], capture_output=True, text=True)
    return result.stderr


def decodes_cleanly(path: Path) -> bool:
    result = subprocess.run([FFMPEG, "-v", "error", "-i", str(path), "-f", "null", "-"], capture_output=True, text=True)
    return result.returncode == 0 and not result.stderr.strip()


def video_facts(path: Path) -> dict:
    """What a player sees, read with PyAV: codecs, pixel format, display size
    (rotation applied), duration, frame count."""
    with av.open(str(path)) as container:
        v = container.streams.video[0] if container.streams.video else None
        a = container.streams.audio[0] if container.streams.audio else None
        facts = {
            "duration_s": float(container.duration / av.time_base) if container.duration else 0.0,
            "audio_codec": a.codec_context.name if a else None,
            "audio_streams": len(container.streams.audio),
        }
        if v is not None:
            frames = list(container.decode(v))
            rotation = int(frames[0].rotation or 0) % 180 if frames else 0
            w, h = v.codec_context.width, v.codec_context.height
            sar = v.sample_aspect_ratio
            facts |= {
                "video_codec": v.codec_context.name, "pix_fmt": v.codec_context.pix_fmt,
                "display": (h, w) if rotation == 90 else (w, h),
                "sar": f"{sar.numerator}:{sar.denominator}" if sar else "1:1",
                "frames": len(frames), "interlaced": any(f.interlaced_frame for f in frames),
            }
    return facts


def hls_variants(master: Path) -> list[dict]:
    """Parse a master playlist; check every variant playlist exists and every
    segment in it decodes. Returns each variant's attributes."""
    lines = master.read_text().splitlines()
    assert lines[0] == "#EXTM3U"
    variants = []
    for i, line in enumerate(lines):
        if line.startswith("#EXT-X-STREAM-INF:"):
            attrs = dict(kv.split("=", 1) for kv in _split_attrs(line.split(":", 1)[1]))
            playlist = master.parent / lines[i + 1]
            segments = [playlist.parent / s for s in playlist.read_text().splitlines() if s and not s.startswith("#")]
            assert segments and "#EXT-X-ENDLIST" in playlist.read_text()
            for seg in segments:
                assert decodes_cleanly(seg), seg
            variants.append({**attrs, "playlist": playlist, "segments": segments})
    assert variants, "no variant in the master playlist"
    return variants


def _split_attrs(text: str) -> list[str]:
    """Split on commas outside quotes (CODECS="avc1...,mp4a...")."""
    parts, current, quoted = [], "", False
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if ch == "," and not quoted:
            parts.append(current)
            current = ""
        else:
            current += ch
    return [*parts, current]


# sRGB's primaries adapted to D50, as ICC profiles store them.
SRGB_PRIMARIES_D50 = ((0.4361, 0.2225, 0.0139), (0.3851, 0.7169, 0.0971), (0.1431, 0.0606, 0.7141))
_D50 = (0.9642, 1.0, 0.8249)


def icc_rgb_profile(primaries=SRGB_PRIMARIES_D50, gamma: float = 2.2) -> bytes:
    """A minimal ICC v2 RGB display profile (matrix + gamma) with the given
    primaries: enough for littlecms, and a way to make a wide or odd colour
    space without shipping a profile file."""
    import struct

    def s15(v: float) -> bytes:
        return struct.pack(">i", round(v * 65536))

    def xyz(v) -> bytes:
        return b"XYZ \0\0\0\0" + b"".join(s15(c) for c in v)

    text = b"fairlane test profile\0"
    desc = b"desc\0\0\0\0" + struct.pack(">I", len(text)) + text + b"\0" * 8 + b"\0\0\0" + b"\0" * 67
    curve = b"curv\0\0\0\0" + struct.pack(">IH", 1, round(gamma * 256)) + b"\0\0"
    tags = [(b"desc", desc), (b"wtpt", xyz(_D50)), (b"rXYZ", xyz(primaries[0])), (b"gXYZ", xyz(primaries[1])),
            (b"bXYZ", xyz(primaries[2])), (b"rTRC", curve), (b"gTRC", curve), (b"bTRC", curve)]
    offset = 128 + 4 + 12 * len(tags)
    table, data = struct.pack(">I", len(tags)), b""
    for sig, body in tags:
        body += b"\0" * (-len(body) % 4)
        table += sig + struct.pack(">II", offset + len(data), len(body))
        data += body
    size = offset + len(data)
    header = (struct.pack(">I", size) + b"\0" * 4 + bytes([2, 0x10, 0, 0]) + b"mntrRGB XYZ " + b"\0" * 12
              + b"acsp" + b"\0" * 24 + struct.pack(">I", 0) + b"".join(s15(c) for c in _D50))
    header += b"\0" * (128 - len(header))
    return header + table + data
