"""Test media made with the real ffmpeg and Pillow, small enough to be quick."""
from __future__ import annotations

import subprocess
from pathlib import Path

import imageio_ffmpeg

FFMPEG = imageio_ffmpeg.get_ffmpeg_exe()


def make_video(path: Path, *, seconds: float = 1.0, size: str = "160x120", audio: bool = True) -> Path:
    args = [FFMPEG, "-v", "error", "-y", "-f", "lavfi", "-i", f"testsrc2=size={size}:rate=25:duration={seconds}"]
    if audio:
        args += ["-f", "lavfi", "-i", f"sine=frequency=440:duration={seconds}", "-c:a", "aac", "-shortest"]
    args += ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p", str(path)]
    subprocess.run(args, check=True)
    return path


def probe_output(path: Path) -> str:
    """ffmpeg's own description of a file's streams (ffprobe is not shipped)."""
    result = subprocess.run([FFMPEG, "-hide_banner", "-i", str(path)], capture_output=True, text=True)
    return result.stderr


def decodes_cleanly(path: Path) -> bool:
    result = subprocess.run([FFMPEG, "-v", "error", "-i", str(path), "-f", "null", "-"], capture_output=True, text=True)
    return result.returncode == 0 and not result.stderr.strip()
