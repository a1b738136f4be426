"""Output bytes per input byte (part 4 of `make bench-media`): what each
pipeline stores for a set of typical files, now and as it was before
the outputs were made worth their bytes, in the same run on the same files.

Before (up to 6d81974): every still image got three sizes, each in WebP and
JPEG, whether or not the sizes differed (a 64x64 icon: six files of 64x64);
every audio file became 160 kbit/s stereo AAC and every video's sound
128 kbit/s stereo AAC in each rendition, whatever the source carried. Now:
one file per distinct size, none larger than the source (transcoding/
images.py), and AAC never above the source's bitrate (transcoding/aac.py).
"Before" is computed by this module: the image sizes by the old rule with
the pipeline's own decoding and encoders, the sound by the pipelines
themselves with the old fixed AAC settings swapped into their ffmpeg
commands. Checked against the old code itself before it changed: the same
files and bytes for every input below."""
from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

from PIL import Image

from tests.media import ffmpeg as make_with_ffmpeg
from tests.media import make_video

# The sizes every still image got before: (name, longest edge).
OLD_IMAGE_SIZES = (("large", 1600), ("medium", 800), ("thumbnail", 320))
# AAC as it was, whatever the source: audio files, and each rendition of a video.
OLD_AUDIO_KBPS, OLD_VIDEO_AUDIO_KBPS = 160, 128


def inputs(folder: Path) -> list[tuple[str, Path]]:
    """(what, file): typical uploads, made here so every run has the same."""
    noisy = "noise=alls=10:allf=t"  # texture, as photos have; a flat test card compresses like no photo
    made = [
        ("icon 64x64 PNG", "icon.png", ["-f", "lavfi", "-i", "testsrc2=s=64x64", "-frames:v", "1"]),
        ("avatar 200x200 JPEG", "avatar.jpg",
         ["-f", "lavfi", "-i", f"testsrc2=s=200x200,{noisy}", "-frames:v", "1", "-q:v", "3"]),
        ("photo 640x480 JPEG", "small-photo.jpg",
         ["-f", "lavfi", "-i", f"testsrc2=s=640x480,{noisy}", "-frames:v", "1", "-q:v", "3"]),
        ("photo 4032x3024 JPEG", "photo.jpg",
         ["-f", "lavfi", "-i", f"testsrc2=s=4032x3024,{noisy}", "-frames:v", "1", "-q:v", "3"]),
        ("screenshot 1280x800 PNG", "screenshot.png", ["-f", "lavfi", "-i", "testsrc=s=1280x800", "-frames:v", "1"]),
        ("10 s mono MP3, 64 kbit/s", "voice.mp3",
         ["-f", "lavfi", "-i", "sine=frequency=440:duration=10", "-ac", "1", "-c:a", "libmp3lame", "-b:a", "64k"]),
        ("30 s stereo MP3, 128 kbit/s", "song.mp3",
         ["-f", "lavfi", "-i", "aevalsrc=sin(440*2*PI*t)|sin(660*2*PI*t):d=30", "-c:a", "libmp3lame", "-b:a", "128k"]),
        ("10 s mono WAV, 16-bit 48 kHz", "take.wav",
         ["-f", "lavfi", "-i", "sine=frequency=300:duration=10", "-ar", "48000", "-ac", "1", "-c:a", "pcm_s16le"]),
    ]
    files = []
    for what, name, args in made:
        make_with_ffmpeg(*args, str(folder / name))
        files.append((what, folder / name))
    video = make_video(folder / "phone.mp4", seconds=5, size="1280x720", audio_args=("-c:a", "aac", "-b:a", "64k",
                                                                                       "-ac", "1"))
    files.append(("5 s 720p video, mono 64 kbit/s sound", video))
    return files


def _old_stills(src: Path, workdir: Path) -> None:
    """The still-image rule before: three sizes, each in WebP and JPEG."""
    from transcoding import images

    with Image.open(src) as img:
        rgb = images._upright_srgb(img)
        variant = rgb
        for name, edge in OLD_IMAGE_SIZES:
            scale = min(1.0, edge / max(rgb.size))
            size = (max(1, round(rgb.width * scale)), max(1, round(rgb.height * scale)))
            if size != variant.size:
                variant = variant.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
            variant.save(workdir / f"{name}.webp", "WEBP", quality=images.WEBP_QUALITY, method=4)
            images._flatten(variant).save(workdir / f"{name}.jpg", "JPEG", quality=images.JPEG_QUALITY,
                                          optimize=True, progressive=True)


@contextmanager
def _aac_as_before(kbps: int):
    """The pipelines' ffmpeg commands with the old fixed AAC settings."""
    from transcoding import ffmpeg

    real = ffmpeg.run

    def run(args, **kwargs):
        args = list(args)
        for i, arg in enumerate(args[:-1]):
            if arg == "-b:a":
                args[i + 1] = f"{kbps}k"
            elif arg == "-ac":
                args[i + 1] = "2"
        return real(args, **kwargs)

    with mock.patch.object(ffmpeg, "run", run):
        yield


def _stored(workdir: Path) -> tuple[int, int]:
    """(files, bytes) of everything a pipeline left to store."""
    files = [p for p in workdir.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def _process(src: Path, workdir: Path, *, before: bool) -> tuple[int, int]:
    from transcoding import pipelines
    from transcoding.probe import probe_file

    workdir.mkdir(parents=True)
    probe = probe_file(src)
    if before and probe.kind == "image" and not probe.animated:
        _old_stills(src, workdir)
    elif before:
        with _aac_as_before(OLD_VIDEO_AUDIO_KBPS if probe.kind == "video" else OLD_AUDIO_KBPS):
            pipelines.PIPELINES[probe.kind](src, workdir, probe, lambda pct: None)
    else:
        pipelines.PIPELINES[probe.kind](src, workdir, probe, lambda pct: None)
    return _stored(workdir)


def measure(work: Path) -> list[dict]:
    """Per input: its bytes, and the files and bytes stored before and now."""
    folder = work / "bytes-inputs"
    folder.mkdir()
    rows = []
    for what, src in inputs(folder):
        size = src.stat().st_size
        row = {"input": what, "bytes_in": size}
        for when in ("before", "now"):
            files, stored = _process(src, work / "bytes-out" / when / src.stem, before=when == "before")
            row[when] = {"files": files, "bytes_out": stored, "out_per_in": round(stored / size, 3)}
        rows.append(row)
    shutil.rmtree(work / "bytes-out", ignore_errors=True)
    return rows


def plot(ax, rows: list[dict]) -> None:
    y = range(len(rows))
    ax.barh([i + 0.2 for i in y], [r["before"]["out_per_in"] for r in rows], 0.4, label="before")
    ax.barh([i - 0.2 for i in y], [r["now"]["out_per_in"] for r in rows], 0.4, label="now")
    for i, r in enumerate(rows):
        ax.annotate(f"{r['now']['out_per_in']:.2f} ({r['now']['files']} files)", (r["now"]["out_per_in"], i - 0.2),
                    va="center", fontsize=8, xytext=(3, 0), textcoords="offset points")
    ax.axvline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.set_yticks(list(y), [r["input"] for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("output bytes per input byte (log)")
    ax.set_title("what is stored per file")
    ax.legend()


def table(rows: list[dict]) -> str:
    lines = ["input | bytes in | before: files, bytes out (per byte in) | now: files, bytes out (per byte in)"]
    for r in rows:
        b, n = r["before"], r["now"]
        lines.append(f"{r['input']} | {r['bytes_in']:,} | {b['files']}, {b['bytes_out']:,} ({b['out_per_in']:.2f}) | "
                     f"{n['files']}, {n['bytes_out']:,} ({n['out_per_in']:.2f})")
    return "\n".join(lines)
