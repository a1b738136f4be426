"""A video's first chunk encoded while its source is still arriving from
object storage (transcoding/streamed.py): the fast-start order a pipe is
fed in demuxes to exactly the file's packets, whatever the file's layout;
the first chunk made from the stream is the first chunk made from the file;
it is made from what has arrived while the rest is held; and a fetch that
fails fails the chunk instead of ending its sound early."""
from __future__ import annotations

import hashlib
import subprocess
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from botocore.config import Config

import media
from project.settings import s3_storages
from tests.media import FFMPEG, ffmpeg, make_video
from tests.promise import wait_for
from tests.storage.held_proxy import HeldProxy
from transcoding import chunks, streamed
from transcoding.errors import MediaError
from transcoding.probe import probe_file, probe_header


def _reader(path: Path):
    def read(offset: int, length: int) -> bytes:
        with open(path, "rb") as fh:
            fh.seek(offset)
            return fh.read(length)
    return read


def _locate(path: Path) -> streamed.Layout | None:
    return streamed.locate(_reader(path), path.stat().st_size)


def _packets(args: list[str], stdin: bytes | None = None) -> str:
    """A digest of every packet (stream, timestamps, size, payload hash), by
    ffmpeg's framemd5 muxer over a stream copy."""
    out = subprocess.run([FFMPEG, "-v", "error", *args, "-map", "0", "-c", "copy", "-f", "framemd5", "-"],
                         input=stdin, capture_output=True, check=True).stdout
    assert out.count(b"\n") > 100
    return hashlib.sha256(out).hexdigest()


def _fed(path: Path, layout: streamed.Layout) -> bytes:
    data = path.read_bytes()
    return b"".join(piece if isinstance(piece, bytes) else data[piece[0]:piece[1]] for piece in layout.pieces())


@pytest.fixture(scope="module")
def moov_last(tmp_path_factory) -> Path:
    """As cameras and ffmpeg write a file: the media first, the moov last."""
    return make_video(tmp_path_factory.mktemp("streamed") / "camera.mp4", seconds=6, size="320x240")


@pytest.mark.parametrize("layout", ["moov last", "fast start", "fragmented"])
def test_the_fed_order_demuxes_to_the_files_own_packets(moov_last, tmp_path, layout):
    path = moov_last
    if layout != "moov last":
        flags = "+faststart" if layout == "fast start" else "frag_keyframe+empty_moov"
        path = tmp_path / "remuxed.mp4"
        ffmpeg("-i", str(moov_last), "-c", "copy", "-movflags", flags, str(path))
    found = _locate(path)
    assert found is not None
    # only a moov after the media is moved, and then its chunk offsets with it
    assert (found.insert_at is not None) == (layout == "moov last")
    assert (found.fed_moov != found.moov) == (layout == "moov last")
    fed = _fed(path, found)
    assert len(fed) == path.stat().st_size
    assert _packets(["-f", "mov", "-i", "pipe:0"], stdin=fed) == _packets(["-i", str(path)])


def test_what_cannot_be_fed_in_order_is_fetched_whole(moov_last, tmp_path):
    mkv = make_video(tmp_path / "clip.mkv", seconds=1)
    assert _locate(mkv) is None
    text = tmp_path / "list.mp4"
    text.write_bytes(b"#EXTM3U\n" * 100)
    assert _locate(text) is None
    # a moov that claims more than the file holds
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(moov_last.read_bytes()[:-100])
    assert _locate(cut) is None
    # a moov after the media with a malformed box inside: not patched blindly
    data = bytearray(moov_last.read_bytes())
    found = _locate(moov_last)
    first_child = found.moov_start + 8
    data[first_child:first_child + 4] = (10 ** 9).to_bytes(4, "big")
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(bytes(data))
    assert _locate(broken) is None


@pytest.fixture
def segments(settings):
    settings.FAIRLANE_HLS_SEGMENT_S = 2
    settings.FAIRLANE_CHUNK_S = 4
    settings.FAIRLANE_CHUNK_THRESHOLD_S = 6


def _first_chunk(source: Path, work: Path, *, feed=None) -> dict[str, bytes]:
    """Chunk 0 (with the sound) of `source`, read from the file or, with
    `feed`, from the stream; its segments by name."""
    probe = probe_file(source)
    work.mkdir()
    chunks.encode_chunk(None if feed else source, work, probe, chunks.plan_for(probe), 0, lambda pct: None,
                        feed=feed)
    return {str(p.relative_to(work / "hls")): p.read_bytes() for p in sorted((work / "hls").rglob("*.ts"))}


@pytest.fixture
def stored(s3_storage, settings, tmp_path, segments) -> tuple[str, Path]:
    """A 10 s 640x360 clip with its moov last, uploaded to the run's SeaweedFS."""
    settings.FAIRLANE_SCRATCH_DIR = tmp_path / "worker-scratch"
    settings.FAIRLANE_STREAM_INPUT_BYTES = 0  # streamed, small as it is
    source = make_video(tmp_path / "upload.mp4", seconds=10, size="640x360")
    key = media.upload_key(owner_id=1)
    media.put_file(source, key)
    return key, source


def test_the_first_chunk_from_the_stream_is_the_first_chunk_from_the_file(stored, tmp_path):
    key, source = stored
    stream = streamed.start(key, tmp_path / "input")
    assert stream is not None
    from_stream = _first_chunk(source, tmp_path / "streamed", feed=stream.feed)
    from_file = _first_chunk(source, tmp_path / "file")
    assert any(name.startswith("audio/") for name in from_file)  # the sound, beside the chunk's video
    assert from_stream == from_file  # every segment of every rendition and the sound, byte for byte
    assert stream.growing.done and (tmp_path / "input").read_bytes() == source.read_bytes()


def test_the_first_chunk_is_made_from_what_has_arrived_and_a_lost_store_fails_it(stored, s3_storage, settings,
                                                                                tmp_path):
    """The store answers the first ~70% of the upload and then holds: the
    first chunk's video (its first 4 s of 10) is made meanwhile, the sound
    waits for the rest; when the store goes away the chunk fails with a
    storage error (retried later), never with a short sound."""
    key, source = stored
    endpoint = urlsplit(s3_storage["FAIRLANE_S3_ENDPOINT"])
    with HeldProxy((endpoint.hostname, endpoint.port), pass_bytes=int(source.stat().st_size * 0.7)) as proxy:
        through = s3_storages({**s3_storage, "FAIRLANE_S3_ENDPOINT": proxy.endpoint})
        # one try once the proxy is gone, instead of botocore's backoff
        through["default"]["OPTIONS"]["client_config"] = through["default"]["OPTIONS"]["client_config"].merge(
            Config(retries={"mode": "standard", "max_attempts": 1}))
        settings.STORAGES = {**settings.STORAGES, **through}
        stream = streamed.start(key, tmp_path / "input")
        assert stream is not None
        failed: list[BaseException] = []

        def encode() -> None:
            try:
                _first_chunk(source, tmp_path / "streamed", feed=stream.feed)
            except BaseException as exc:
                failed.append(exc)

        thread = threading.Thread(target=encode)
        thread.start()
        try:
            playlist = tmp_path / "streamed" / "hls" / "360p" / "index.m3u8"
            # the chunk's video is made: its muxer has ended the playlist, every segment written
            wait_for(lambda: playlist.is_file() and "#EXT-X-ENDLIST" in playlist.read_text(), 120,
                     "the first chunk's video made")
            assert proxy.holding.is_set() and not stream.growing.done and thread.is_alive()
        finally:
            proxy.close()
            thread.join(300)
    assert not thread.is_alive()
    # transient (an OSError: retried later), whether the store's error or
    # ffmpeg's time limit came first; never a media error or a short sound
    assert len(failed) == 1 and isinstance(failed[0], OSError), failed
    with pytest.raises(media.StorageUnavailable):
        stream.growing.wait_all()


def test_a_first_chunk_of_a_cut_off_file_is_refused_by_the_scan_beside_it(moov_last, s3_storage, settings, segments,
                                                                         tmp_path):
    """Split on its header alone, a cut-off download's first chunk starts at
    once (its moov, in front, says 6 s; 60 % of the media is there); the
    whole file's scan beside it refuses the file, which fails the chunk
    whether the scan or the encode ends first."""
    settings.FAIRLANE_SCRATCH_DIR = tmp_path / "worker-scratch"
    settings.FAIRLANE_STREAM_INPUT_BYTES = 0
    whole = tmp_path / "fast.mp4"
    ffmpeg("-i", str(moov_last), "-c", "copy", "-movflags", "+faststart", str(whole))
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(whole.read_bytes()[:int(whole.stat().st_size * 0.6)])
    key = media.upload_key(owner_id=1)
    media.put_file(cut, key)
    stream = streamed.start(key, tmp_path / "input")
    assert stream is not None
    probe = probe_header(tmp_path / "input")
    assert probe is not None and probe.duration_s >= 5.9  # the header alone lets it through
    work = tmp_path / "chunk0"
    work.mkdir()
    with pytest.raises(MediaError) as refused:
        streamed.encode_scanned(stream, tmp_path / "input", lambda check: chunks.encode_chunk(
            None, work, probe, chunks.plan_for(probe), 0, lambda pct: None, feed=stream.feed,
            sound_feed=stream.follow, check=check))
    assert refused.value.code == "truncated"
    with pytest.raises(MediaError) as itself:
        probe_file(cut)
    assert itself.value.code == refused.value.code  # what the scan of the file itself says
