"""A large source as phones and cameras write it: `python -m bench.large_source OUT.mp4 [--gib 4]`.

A 1080p30 H.264 + AAC MP4 of about N GiB whose moov box (the index) is at
the END of the file, after the media data: a recorder only knows the
index once it stops. A reader must therefore fetch the tail before it can
decode the head, which is what a large upload costs on object storage
(`make bench-ttfp-large`).

One clip of CLIP_S seconds is encoded (testsrc2 with per-frame noise, so
that x264 spends the whole bitrate, at a phone's 17 Mb/s; a sine tone in
AAC 128 kb/s), then copies of it are joined with ffmpeg's concat demuxer
and `-c copy` (seconds, not the half hour an encode of the whole would
take): the largest number of copies that stays within N GiB, at least one.
At 4 GiB that is 32 copies of a ~130 MB clip, ~4.17 GB and ~32 minutes
(a 33rd would pass 4 GiB, and with it the worker's default input cache,
FAIRLANE_INPUT_CACHE_BYTES). The moov box's place is checked afterwards.

The clip is kept beside OUT (`<OUT's stem>.clip-60s.mp4`) and both are
reused when present (OUT when its size is what N GiB asks for): a second
run costs nothing. Both are written under a temporary name and renamed, so
an interrupted run leaves nothing that looks finished.
"""
from __future__ import annotations

import argparse
import struct
import subprocess
import sys
from pathlib import Path

GIB = 1024 ** 3
CLIP_S = 60.0
SIZE, RATE = "1920x1080", 30
# A phone's 1080p30 bitrate; with the noise x264 uses all of it (constant
# bitrate in effect), so the clip's size, and the copies' count, are steady.
VIDEO_ARGS = ("-c:v", "libx264", "-preset", "ultrafast", "-b:v", "17M", "-maxrate", "17M", "-bufsize", "34M",
              "-g", "60", "-pix_fmt", "yuv420p")
AUDIO_ARGS = ("-c:a", "aac", "-b:a", "128k")


def ffmpeg_exe() -> str:
    import imageio_ffmpeg

    return imageio_ffmpeg.get_ffmpeg_exe()


def make_clip(path: Path, *, seconds: float = CLIP_S, size: str = SIZE) -> Path:
    """Encode one clip of `seconds` (1080p30 H.264 17 Mb/s with noise, AAC
    128 kb/s) to `path`; reuse it when it exists."""
    if path.exists():
        return path
    partial = path.with_name(path.name + ".partial")
    subprocess.run([ffmpeg_exe(), "-v", "error", "-y",
                    "-f", "lavfi", "-i", f"testsrc2=size={size}:rate={RATE}:duration={seconds:g}",
                    "-f", "lavfi", "-i", f"sine=frequency=440:duration={seconds:g}",
                    "-map", "0:v", "-map", "1:a", "-vf", "noise=alls=12:allf=t", *VIDEO_ARGS, *AUDIO_ARGS,
                    "-shortest", "-f", "mp4", str(partial)], check=True)
    partial.rename(path)
    return path


def top_level_boxes(path: Path) -> list[tuple[str, int, int]]:
    """The MP4's top-level boxes: (type, offset, size), reading only their headers."""
    boxes, offset, end = [], 0, path.stat().st_size
    with open(path, "rb") as fh:
        while offset < end:
            fh.seek(offset)
            header = fh.read(16)
            size, kind = struct.unpack(">I4s", header[:8])
            if size == 1:  # a 64-bit size follows the type
                size = struct.unpack(">Q", header[8:16])[0]
            elif size == 0:  # to the end of the file
                size = end - offset
            boxes.append((kind.decode("latin-1"), offset, size))
            offset += size
    return boxes


def moov_at_end(path: Path) -> bool:
    kinds = [kind for kind, _, _ in top_level_boxes(path)]
    return "moov" in kinds and "mdat" in kinds and kinds.index("moov") > kinds.index("mdat")


def copies_for(gib: float, clip_bytes: int) -> int:
    """The most copies of the clip that stay within `gib` GiB, at least one."""
    return max(1, int(gib * GIB // clip_bytes))


def make_large(out: Path, *, gib: float = 4.0) -> Path:
    """A ~`gib` GiB source at `out`, moov at the end (see the module's doc)."""
    out = out.resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    clip = make_clip(out.with_name(f"{out.stem}.clip-{CLIP_S:g}s.mp4"))
    clip_bytes = clip.stat().st_size
    copies = copies_for(gib, clip_bytes)
    # A concat of n copies is within a few hundred KB of n clips (one moov
    # instead of n): half a clip tells a finished output from another size's.
    if out.exists() and abs(out.stat().st_size - copies * clip_bytes) < clip_bytes / 2 and moov_at_end(out):
        print(f"{out}: reused ({out.stat().st_size / 1e9:.2f} GB)", flush=True)
        return out
    listing = out.with_name(out.name + ".concat.txt")
    listing.write_text("".join(f"file '{clip}'\n" for _ in range(copies)))
    partial = out.with_name(out.name + ".partial")
    try:
        # mp4's muxer writes moov after mdat unless told `-movflags +faststart`:
        # the recorder's layout, which this file is for.
        subprocess.run([ffmpeg_exe(), "-v", "error", "-y", "-f", "concat", "-safe", "0", "-i", str(listing),
                        "-c", "copy", "-f", "mp4", str(partial)], check=True)
        if not moov_at_end(partial):
            raise RuntimeError(f"{partial}: the moov box is not after the media data: {top_level_boxes(partial)}")
        partial.rename(out)
    finally:
        listing.unlink(missing_ok=True)
        partial.unlink(missing_ok=True)
    print(f"{out}: {copies} x {CLIP_S:g} s, {out.stat().st_size / 1e9:.2f} GB "
          f"({out.stat().st_size / GIB:.2f} GiB), moov at the end", flush=True)
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="bench.large_source", description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path, help="the MP4 to write (reused when present)")
    p.add_argument("--gib", type=float, default=4.0, help="its size, about (at most, but one clip at least)")
    args = p.parse_args(argv)
    if args.gib <= 0:
        p.error("--gib must be positive")
    make_large(args.out, gib=args.gib)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
