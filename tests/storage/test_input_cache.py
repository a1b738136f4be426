"""A worker host's input cache (media/input_cache.py) against the run's real
SeaweedFS: a key is fetched from the store once per host, every attempt's
copy is a read-only hard link, concurrent attempts fetch once, and the
cache keeps to its bound by dropping the least recently used inputs
without touching a copy an attempt still reads."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import media
from media import input_cache, owners, store
from tests.promise import wait_for
from tests.storage.held_proxy import HeldProxy

pytestmark = pytest.mark.django_db


@pytest.fixture
def cache(s3_storage, settings, tmp_path) -> Path:
    settings.FAIRLANE_SCRATCH_DIR = tmp_path / "scratch"
    settings.FAIRLANE_INPUT_CACHE_BYTES = 10_000
    return tmp_path / "scratch" / "inputs"


def _stored(tmp_path: Path, name: str, body: bytes) -> str:
    local = tmp_path / f"{name}.src"
    local.write_bytes(body)
    key = media.upload_key(owner_id=1)
    media.put_file(local, key)
    return key


def _dest(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / "scratch" / name
    folder.mkdir(parents=True)
    return folder / "input"


def test_a_second_attempt_on_the_host_reads_the_cache_not_the_store(cache, tmp_path):
    key = _stored(tmp_path, "a", b"a" * 3000)
    first, second = _dest(tmp_path, "attempt-1"), _dest(tmp_path, "attempt-2")
    assert media.fetch_input(key, first) is True
    media.delete(key)  # the store no longer has it: only the cache can answer now
    assert media.fetch_input(key, second) is False
    assert second.read_bytes() == b"a" * 3000
    assert first.stat().st_ino == second.stat().st_ino  # hard links, not copies
    assert second.stat().st_mode & 0o222 == 0  # read-only for everyone


def test_the_splitting_attempts_copy_is_kept_for_the_parts(cache, tmp_path):
    key = _stored(tmp_path, "a", b"split source")
    split = _dest(tmp_path, "split")
    media.fetch(key, split, read_only=True)
    media.keep_input(key, split)
    media.delete(key)
    part = _dest(tmp_path, "part")
    assert media.fetch_input(key, part) is False and part.read_bytes() == b"split source"


def test_attempts_asking_at_once_fetch_once(cache, tmp_path, monkeypatch):
    key = _stored(tmp_path, "a", b"x" * 4000)
    calls, gate = [], threading.Barrier(4)
    real = input_cache.fetch_into

    def counted(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(input_cache, "fetch_into", counted)
    dests = [_dest(tmp_path, f"attempt-{n}") for n in range(4)]

    def attempt(dest: Path) -> None:
        gate.wait()
        media.fetch_input(key, dest)

    threads = [threading.Thread(target=attempt, args=(d,)) for d in dests]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [key]
    assert all(d.read_bytes() == b"x" * 4000 for d in dests)


def test_the_least_recently_used_input_goes_when_the_cache_is_full(cache, tmp_path):
    keys = [_stored(tmp_path, name, name.encode() * 4000) for name in "abc"]  # 4,000 bytes each, bound 10,000
    a_copy = _dest(tmp_path, "reads-a")
    media.fetch_input(keys[0], a_copy)
    media.fetch_input(keys[1], _dest(tmp_path, "b"))
    os.utime(input_cache._entry(keys[1]), (1, 1))  # b is the oldest now, a was used after it
    media.fetch_input(keys[2], _dest(tmp_path, "c"))
    assert not input_cache._entry(keys[1]).exists()
    assert input_cache._entry(keys[0]).exists() and input_cache._entry(keys[2]).exists()
    assert sum(p.stat().st_size for p in cache.iterdir() if not p.suffix) <= 10_000
    media.fetch_input(keys[1], _dest(tmp_path, "b-again"))  # fetched again from the store
    assert not input_cache._entry(keys[0]).exists()  # a is the least recently used now
    assert a_copy.read_bytes() == b"a" * 4000  # the attempt's own link keeps its bytes


def _gone_pid() -> int:
    """The pid of a process that has just ended (and was reaped)."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


ENTRY = "ab" * 32  # a key's file name in the cache (a SHA-256)


@pytest.mark.parametrize(("name", "kept"), [
    # a partial fetch, named with its owner's pid and start time
    (lambda: f"{ENTRY}.part-{owners.owner_tag()}-0123abcd", True),
    (lambda: f"{ENTRY}.part-{os.getpid()}-1-0123abcd", False),  # the pid lives, but it is another process
    (lambda: f"{ENTRY}.part-{_gone_pid()}-{owners.start_time(os.getpid())}-0123abcd", False),
    # earlier versions' names: their own partial file, and boto3's temporary file beside it
    (lambda: f"{ENTRY}.part-{os.getpid()}", True),
    (lambda: f"{ENTRY}.part-{_gone_pid()}", False),
    (lambda: f"{ENTRY}.part-{os.getpid()}.3fA9c0De", True),
    (lambda: f"{ENTRY}.part-{_gone_pid()}.3fA9c0De", False),
    # the lock of an entry that is not there (its fetch died)
    (lambda: f"{ENTRY}.lock", False),
])
def test_the_sweep_removes_what_fetches_of_gone_processes_left(cache, name, kept):
    cache.mkdir(parents=True)
    path = cache / name()
    path.write_bytes(b"half")
    assert (media.scratch_sweep(), path.exists()) == (0 if kept else 1, kept)


def test_the_sweep_leaves_an_inputs_lock_and_an_old_partial_of_a_live_pid_goes(cache):
    cache.mkdir(parents=True)
    (cache / ENTRY).write_bytes(b"an input")
    (cache / f"{ENTRY}.lock").touch()
    stale = cache / f"{'cd' * 32}.part-{os.getpid()}"  # an earlier version's, untouched for an hour
    stale.write_bytes(b"half")
    os.utime(stale, (1, 1))
    assert media.scratch_sweep() == 1
    assert sorted(p.name for p in cache.iterdir()) == [ENTRY, f"{ENTRY}.lock"]


def test_a_lock_held_by_a_fetch_under_way_stays(cache):
    with input_cache._locked(cache / ENTRY):
        assert media.scratch_sweep() == 0
        assert (cache / f"{ENTRY}.lock").exists()


def test_without_object_storage_nothing_is_cached(filesystem_storage, settings, tmp_path):
    settings.FAIRLANE_SCRATCH_DIR = tmp_path / "scratch"
    key = _stored(tmp_path, "a", b"on disk")
    dest = _dest(tmp_path, "a")
    assert media.fetch_input(key, dest) is True and dest.read_bytes() == b"on disk"
    assert not (tmp_path / "scratch" / "inputs").exists()
    assert dest.stat().st_ino == store._local_path(key).stat().st_ino  # fetch's own hard link


# A worker process's fetch into the cache, on its own (the settings come from
# the environment, as a worker's do).
FETCH_SCRIPT = """
import sys
from pathlib import Path

import django

django.setup()
import media

media.fetch_input(sys.argv[1], Path(sys.argv[2]))
"""
MIB = 1024 * 1024


def test_a_worker_killed_mid_fetch_leaves_nothing_past_the_sweep(cache, s3_storage, settings, tmp_path):
    """The download's temporary file counts against the cache's bound while
    it exists (the cache makes room for it before the bytes arrive), and
    once its process is SIGKILLed mid-transfer the sweep a worker's start
    (or its dead child) runs removes every trace of it."""
    settings.FAIRLANE_INPUT_CACHE_BYTES = 6 * MIB
    old, big = _stored(tmp_path, "old", os.urandom(3 * MIB)), _stored(tmp_path, "big", os.urandom(4 * MIB))
    media.fetch_input(old, _dest(tmp_path, "reads-old"))
    endpoint = urlsplit(s3_storage["FAIRLANE_S3_ENDPOINT"])
    with HeldProxy((endpoint.hostname, endpoint.port), pass_bytes=MIB) as proxy:
        env = {**os.environ, **s3_storage, "FAIRLANE_S3_ENDPOINT": proxy.endpoint,
               "FAIRLANE_SCRATCH_DIR": str(settings.FAIRLANE_SCRATCH_DIR),
               "FAIRLANE_INPUT_CACHE_BYTES": str(6 * MIB), "DJANGO_SETTINGS_MODULE": "project.settings"}
        worker = subprocess.Popen([sys.executable, "-c", FETCH_SCRIPT, big, str(_dest(tmp_path, "killed"))],
                                  env=env, cwd=Path(__file__).resolve().parents[2])
        try:
            assert proxy.holding.wait(60), "the worker's download never reached the proxy's hold"
            # Mid-transfer: the partial file counts, so the older input made room for it.
            assert not input_cache._entry(old).exists()
            assert sum(p.stat().st_size for p in cache.iterdir()) <= 6 * MIB
        finally:
            worker.send_signal(signal.SIGKILL)
            worker.wait()
    assert worker.returncode == -signal.SIGKILL
    media.scratch_sweep()
    assert sorted(p.name for p in cache.iterdir()) == []
    # and the next fetch on the host goes on as if nothing had happened
    assert media.fetch_input(big, _dest(tmp_path, "next")) is True
    assert [p.name for p in cache.iterdir() if not p.suffix] == [input_cache._entry(big).name]


def test_a_streamed_fetch_keeps_near_its_readers_until_released(cache, settings, monkeypatch, tmp_path):
    """A Growing input (a large video whose first chunk is encoded while it
    arrives) fetches in order and, until released, never more than
    PACED_AHEAD past the furthest byte a reader waited for; released, it
    fetches the rest and becomes the cache's entry, byte for byte."""
    settings.FAIRLANE_INPUT_CACHE_BYTES = 100 * MIB
    monkeypatch.setattr(input_cache, "RANGE_BYTES", MIB)
    monkeypatch.setattr(input_cache, "PACED_AHEAD", 4 * MIB)
    body = os.urandom(24 * MIB)
    key = _stored(tmp_path, "video", body)
    growing = media.stream_input(key, len(body), {len(body) - 1000: body[-1000:]})  # a moov at the end, known
    growing.wait(0, 2 * MIB)
    # what readers may need next arrives without anyone asking for it...
    edge = 6 * MIB  # the pace's: 2 MiB waited for, 4 MiB ahead
    wait_for(lambda: growing._covered(0, edge), 60, "the fetch up to the pace's edge")
    # ...and nothing past it until a reader goes further or the fetch is released
    assert not growing.done and not growing._covered(0, edge + MIB)
    fd = growing.open()
    try:
        assert os.pread(fd, edge, 0) == body[:edge]
    finally:
        os.close(fd)
    growing.release()
    growing.wait_all()
    assert growing.done and growing.path == input_cache._entry(key)
    assert growing.path.read_bytes() == body
    assert media.fetch_input(key, _dest(tmp_path, "next-part")) is False  # the next part on the host: the cache
