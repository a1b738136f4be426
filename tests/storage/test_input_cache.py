"""A worker host's input cache (media/input_cache.py) against the run's real
SeaweedFS: a key is fetched from the store once per host, every attempt's
copy is a read-only hard link, concurrent attempts fetch once, and the
cache keeps to its bound by dropping the least recently used inputs
without touching a copy an attempt still reads."""
from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

import media
from media import input_cache, store

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
    real = input_cache.fetch

    def counted(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(input_cache, "fetch", counted)
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


def test_a_dead_fetchs_partial_file_is_removed(cache, tmp_path):
    cache.mkdir(parents=True)
    stale = cache / "0123.part-99999"
    stale.write_bytes(b"half")
    os.utime(stale, (1, 1))
    live = cache / "4567.part-1"
    live.write_bytes(b"being written")
    media.fetch_input(_stored(tmp_path, "a", b"new"), _dest(tmp_path, "a"))
    assert not stale.exists() and live.exists()


def test_without_object_storage_nothing_is_cached(filesystem_storage, settings, tmp_path):
    settings.FAIRLANE_SCRATCH_DIR = tmp_path / "scratch"
    key = _stored(tmp_path, "a", b"on disk")
    dest = _dest(tmp_path, "a")
    assert media.fetch_input(key, dest) is True and dest.read_bytes() == b"on disk"
    assert not (tmp_path / "scratch" / "inputs").exists()
    assert dest.stat().st_ino == store._local_path(key).stat().st_ino  # fetch's own hard link
