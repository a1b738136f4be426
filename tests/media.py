"""Test media made with the real ffmpeg and Pillow, small enough to be quick,
and a real probe (PyAV, ffmpeg) to check what the pipelines made."""
from __future__ import annotations

import errno
import os
import socket
import struct
import subprocess
import threading
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


def timestamped(path: Path, frames_at_s: list[float], *, audio_at_s: list[float] = (), size=(160, 120)) -> Path:
    """A real file (PyAV, x264 and AAC) holding one video frame at each of
    `frames_at_s` and one 1024-sample block of silence at each of
    `audio_at_s`, whatever the gaps between them: how a crafted file makes
    a few packets claim hours."""
    from fractions import Fraction

    with av.open(str(path), "w") as out:
        video = out.add_stream("libx264", rate=25)
        video.width, video.height, video.pix_fmt = *size, "yuv420p"
        video.codec_context.time_base = Fraction(1, 1000)
        audio = out.add_stream("aac", rate=48000, layout="mono") if audio_at_s else None
        for n, at in enumerate(frames_at_s):
            frame = av.VideoFrame(*size, "yuv420p")
            for plane in frame.planes:
                plane.update(bytes([n * 40 % 256]) * plane.buffer_size)
            frame.pts, frame.time_base = round(at * 1000), Fraction(1, 1000)
            out.mux(video.encode(frame))
        out.mux(video.encode())
        for at in audio_at_s:
            block = av.AudioFrame(format="fltp", layout="mono", samples=1024)
            block.planes[0].update(bytes(block.planes[0].buffer_size))
            block.sample_rate, block.pts, block.time_base = 48000, round(at * 48000), Fraction(1, 48000)
            out.mux(audio.encode(block))
        if audio is not None:
            out.mux(audio.encode())
    return path


def one_page_pdf(path: Path, contents: bytes, *, page: bytes = b"/Type /Page /MediaBox [0 0 612 792]") -> Path:
    """A PDF written by hand: one page (its dictionary's entries `page`)
    drawing `contents`, Flate-compressed, so a few bytes can ask a lot."""
    import zlib

    stream = zlib.compress(contents, 9)
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< %s /Parent 2 0 R /Contents 4 0 R >>" % page,
               b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(stream), stream)]
    body, offsets = b"%PDF-1.7\n", []
    for number, obj in enumerate(objects, 1):
        offsets.append(len(body))
        body += b"%d 0 obj\n%s\nendobj\n" % (number, obj)
    xref = (b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
            + b"".join(b"%010d 00000 n \n" % o for o in offsets))
    trailer = b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, len(body))
    path.write_bytes(body + xref + trailer)
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


def web_ready(out: dict) -> tuple[dict, list[dict]]:
    """Check what every video pipeline output must be, whatever the source:
    an H.264 yuv420p MP4 with even dimensions, a poster of its size, and an
    HLS ladder whose playlists parse and whose every segment decodes as
    H.264 yuv420p at an even size. Returns the MP4's facts and the variants."""
    facts = video_facts(out["mp4"][0])
    assert (facts["video_codec"], facts["pix_fmt"]) == ("h264", "yuv420p")
    assert all(side % 2 == 0 for side in facts["display"]), facts["display"]
    from PIL import Image

    with Image.open(out["poster"][0]) as poster:
        assert poster.size == facts["display"]
    variants = hls_variants(out["hls"][0])
    for variant in variants:
        width, height = (int(v) for v in variant["RESOLUTION"].split("x"))
        segment = video_facts(variant["segments"][0])
        assert width % 2 == 0 and height % 2 == 0 and segment["display"] == (width, height)
        assert (segment["video_codec"], segment["pix_fmt"]) == ("h264", "yuv420p")
    return facts, variants


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


class Tripwire:
    """Bait for a file that tries to make ffmpeg read something else: a FIFO
    on disk and a listening TCP socket, each recording whether anything ever
    opened it.

    A FIFO rather than a plain file because opening one for reading blocks
    until a writer comes: a poller that keeps trying to open it for writing
    is therefore certain to see every reader (atime is not: relatime and
    noatime mounts skip it). Whoever opens either gets MARKER, so outputs can
    also be searched for it.
    """

    MARKER = b"FAIRLANE-TRIPWIRE-7f3a"

    def __init__(self, directory: Path):
        self.path = directory / "sentinel.ts"
        os.mkfifo(self.path)
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}/sentinel.ts"
        self.touched: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._watch_fifo, daemon=True),
                         threading.Thread(target=self._watch_socket, daemon=True)]

    def __enter__(self) -> Tripwire:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()
        self._server.close()

    def _watch_fifo(self) -> None:
        while not self._stop.wait(0.005):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_NONBLOCK)
            except OSError as exc:  # ENXIO: nobody has it open for reading
                if exc.errno == errno.ENXIO:
                    continue
                raise
            self.touched.append(f"file {self.path}")
            try:
                os.write(fd, self.MARKER)
            except (BlockingIOError, BrokenPipeError):  # a full pipe, or a reader gone already: touched all the same
                pass
            finally:
                os.close(fd)

    def _watch_socket(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            self.touched.append(f"connection to {self.url}")
            with conn:
                conn.sendall(b"HTTP/1.0 200 OK\r\n\r\n" + self.MARKER)


def bait_playlist(tripwire: Tripwire) -> str:
    """An HLS playlist whose segments are the tripwire's file and URL."""
    return (f"#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\nfile:{tripwire.path}\n#EXTINF:1,\n{tripwire.path}\n"
            f"#EXTINF:1,\n{tripwire.url}\n#EXT-X-ENDLIST\n")


# QuickTime boxes that hold the boxes on the way from the movie to a track's data references.
_DREF_PATH = (b"moov", b"trak", b"mdia", b"minf", b"dinf")


def with_external_track(src: Path, dst: Path, target: Path) -> Path:
    """A copy of an MP4/MOV whose tracks say their samples are in `target`:
    each data reference becomes a Mac alias record (what Final Cut and
    QuickTime write for reference movies) naming it, with the levels set so
    that a demuxer allowed to follow it looks next to the file itself.
    `src` must have its moov after mdat (ffmpeg's default), so that growing
    moov moves no sample."""
    name = target.name.encode()
    record = (b"\0" * 10 + bytes([0]) + b"\0" * 27 + b"\0" * 12 + bytes([len(name)]) + name.ljust(63, b"\0")
              + b"\0" * 16 + struct.pack(">HH", 1, 1) + b"\0" * 16)
    path = str(target).encode()
    path += b"\0" * (len(path) % 2)
    record += struct.pack(">hH", 2, len(path)) + path + struct.pack(">hH", -1, 0)
    alias = struct.pack(">I", 12 + len(record)) + b"alis" + b"\0\0\0\0" + record  # flags 0: not in this file
    dref = b"\0\0\0\0" + struct.pack(">I", 1) + alias

    def rewrite(data: bytes, depth: int) -> bytes:
        out, offset = b"", 0
        while offset < len(data):
            size, kind = struct.unpack(">I4s", data[offset:offset + 8])
            body = data[offset + 8:offset + size]
            if kind == b"dref":
                body = dref
            elif depth < len(_DREF_PATH) and kind == _DREF_PATH[depth]:
                body = rewrite(body, depth + 1)
            out += struct.pack(">I", 8 + len(body)) + kind + body
            offset += size
        return out

    dst.write_bytes(rewrite(src.read_bytes(), 0))
    return dst


def _chunk(fourcc: bytes, body: bytes) -> bytes:
    return fourcc + struct.pack("<I", len(body)) + body + b"\0" * (len(body) % 2)


def _riff_list(kind: bytes, *chunks: bytes) -> bytes:
    return _chunk(b"LIST", kind + b"".join(chunks))


def avi_with_gab2_subtitle(dst: Path, payload: str, *, frames: int = 10, size: tuple[int, int] = (96, 64)) -> Path:
    """An MJPEG AVI (frames from Pillow, 10 per second) with a GAB2 subtitle
    stream: a whole subtitle file inside one packet, which libavformat's AVI
    demuxer probes and opens with a nested demuxer. The classic exploit put
    an HLS playlist there (ffmpeg before 3.3 followed it)."""
    import io

    from PIL import Image

    jpegs = []
    for i in range(frames):
        buf = io.BytesIO()
        Image.new("RGB", size, (25 * i % 256, 80, 160)).save(buf, "JPEG")
        jpegs.append(buf.getvalue())
    text = payload.encode()
    title = "English".encode("utf-16-le") + b"\0\0"
    gab2 = b"GAB2\0" + struct.pack("<H", 2) + struct.pack("<I", len(title)) + title + struct.pack("<HI", 4, len(text)) + text
    width, height = size
    avih = struct.pack("<10I4I", 100_000, 0, 0, 0x10, frames, 0, 2, 0, width, height, 0, 0, 0, 0)
    vids = struct.pack("<4s4sIHHIIIIIIIIhhhh", b"vids", b"MJPG", 0, 0, 0, 0, 1, 10, 0, frames, 0, 0xFFFFFFFF, 0,
                       0, 0, width, height)
    bitmap = struct.pack("<IiiHH4sIiiII", 40, width, height, 1, 24, b"MJPG", width * height * 3, 0, 0, 0, 0)
    txts = struct.pack("<4s4sIHHIIIIIIIIhhhh", b"txts", b"\0\0\0\0", 0, 0, 0, 0, 1, 10, 0, 1, 0, 0xFFFFFFFF, 0,
                       0, 0, 0, 0)
    hdrl = _riff_list(b"hdrl", _chunk(b"avih", avih), _riff_list(b"strl", _chunk(b"strh", vids), _chunk(b"strf", bitmap)),
                      _riff_list(b"strl", _chunk(b"strh", txts), _chunk(b"strf", b"")))
    packets = [(b"01tx", gab2)] + [(b"00dc", jpeg) for jpeg in jpegs]
    movi, index, offset = b"", b"", 4  # idx1 offsets count from the 'movi' list type
    for fourcc, body in packets:
        index += struct.pack("<4sIII", fourcc, 0x10, offset, len(body))
        movi += _chunk(fourcc, body)
        offset = 4 + len(movi)
    riff = b"AVI " + hdrl + _riff_list(b"movi", movi) + _chunk(b"idx1", index)
    dst.write_bytes(b"RIFF" + struct.pack("<I", len(riff)) + riff)
    return dst
