"""A chunked video's whole-file probe once per host (transcoding/scan_notes.py):
the real probe (its decoding child, the packet scan) runs for the first part
on a host, and the parts after it read its note; a refusal is noted nowhere,
a note that is not a probe or came from other limits is scanned again, two
parts at once scan once, and notes go with their input or after a day."""
from __future__ import annotations

import json
import os
import threading
import time

import pytest

import media
from media import input_cache
from tests.media import make_video
from transcoding import scan_notes
from transcoding.errors import MediaError
from transcoding.probe import Probe

KEY = "uploads/7/0f3c/clip.mp4"


@pytest.fixture
def scans(monkeypatch, settings, tmp_path) -> list:
    """The real probe_file, each call counted."""
    settings.FAIRLANE_SCRATCH_DIR = tmp_path / "scratch"
    calls: list = []
    real = scan_notes.probe_file

    def counted(path):
        calls.append(path)
        return real(path)

    monkeypatch.setattr(scan_notes, "probe_file", counted)
    return calls


@pytest.fixture(scope="module")
def video(tmp_path_factory):
    return make_video(tmp_path_factory.mktemp("scan-notes") / "clip.mp4", seconds=2, size="320x240")


def test_the_parts_after_the_first_on_a_host_read_its_scan(scans, video):
    first = scan_notes.probe_noted(KEY, video)
    again = scan_notes.probe_noted(KEY, video)
    assert len(scans) == 1
    assert again == first and first.kind == "video" and first.frames > 0
    assert scan_notes.probe_noted("uploads/7/other/clip.mp4", video) == first and len(scans) == 2  # its own key


def test_a_refused_file_is_noted_nowhere(scans, tmp_path):
    text = tmp_path / "notes.mp4"
    text.write_text("not a video at all")
    for _ in range(2):
        with pytest.raises(MediaError):
            scan_notes.probe_noted(KEY, text)
    assert len(scans) == 2 and not input_cache._note_path(KEY, scan_notes.note_name()).exists()


@pytest.mark.parametrize("written", ['{"kind": "video", "contai', '{"kind": "video", "streams": [{"nope": 1}]}',
                                     '[1, 2]', "\x00\xff"])
def test_a_note_that_is_not_a_probe_is_scanned_again_and_replaced(scans, video, written):
    note = input_cache._note_path(KEY, scan_notes.note_name())
    note.parent.mkdir(parents=True)
    note.write_text(written)
    probe = scan_notes.probe_noted(KEY, video)
    assert len(scans) == 1 and Probe.from_json(json.loads(note.read_text())) == probe


def test_other_limits_scan_again(scans, video, settings):
    scan_notes.probe_noted(KEY, video)
    settings.FAIRLANE_MAX_DURATION_S = 1  # the 2 s clip is now too long
    with pytest.raises(MediaError) as refused:
        scan_notes.probe_noted(KEY, video)
    assert refused.value.code == "too_long" and len(scans) == 2


def test_two_parts_of_a_host_asking_at_once_scan_once(scans, video):
    start, found = threading.Barrier(2), []

    def part() -> None:
        start.wait()
        found.append(scan_notes.probe_noted(KEY, video))

    threads = [threading.Thread(target=part) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(found) == 2 and found[0] == found[1] and len(scans) == 1


def test_a_note_goes_with_its_input_and_after_a_day(settings, tmp_path):
    settings.FAIRLANE_SCRATCH_DIR = tmp_path / "scratch"
    old, fresh = input_cache._note_path("a", "probe-1.json"), input_cache._note_path("b", "probe-1.json")
    old.parent.mkdir(parents=True)
    for note in (old, fresh):
        note.write_text("{}")
    os.utime(old, (time.time() - input_cache.NOTE_TTL_S - 60,) * 2)
    assert media.scratch_sweep() == 1 and not old.exists() and fresh.exists()
    # Evicted with the input it was learnt from (the cache over its bound).
    entry = input_cache._entry("b")
    entry.write_bytes(b"x" * 100)
    settings.FAIRLANE_INPUT_CACHE_BYTES = 10
    input_cache._evict(keep=tmp_path / "nothing")
    assert not entry.exists() and not fresh.exists()


@pytest.mark.parametrize("name", ["../probe.json", "", "Probe.json", "a/b", "x" * 65])
def test_a_note_name_stays_in_the_cache(settings, tmp_path, name):
    settings.FAIRLANE_SCRATCH_DIR = tmp_path / "scratch"
    with pytest.raises(ValueError):
        media.input_note(KEY, name, lambda: b"{}", json.loads)
