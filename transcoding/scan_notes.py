"""A video's whole-file probe once per host, not once per part.

Why: every part of a chunked video (transcoding/chunks.py) probed the whole
source before encoding its piece, and the probe's packet scan reads every
packet: about 6.8 s of a core for a 4 GB source, so a video of 61 parts
was scanned 61 times across its hosts. The object under an upload key never
changes (media/keys.py), so neither does what the scan says of it: the first
part on a host to scan it (or the first chunk, which scans beside its
encode) leaves the probe as a note beside the host's copy of the input
(media.input_note), and the other parts on that host read it.

Only a probe that passed is noted: a refused file fails its part, and the
video with it. A note names the probe's code and limits it came from, so a
deploy or a settings change that alters what the probe refuses scans again.
A note that cannot be read as a probe is ignored (scanned again).
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import uuid
from functools import cache
from pathlib import Path

import media
from transcoding import probe as probe_module
from transcoding.probe import Probe, configured_limits, probe_file

log = logging.getLogger(__name__)


@cache
def _code() -> str:
    """What the probe decides by: its module's source, hashed once per process."""
    digest = hashlib.sha256(Path(probe_module.__file__).read_bytes())
    return digest.hexdigest()[:16]


def _note(key: str) -> Path:
    limits = configured_limits()
    tag = hashlib.sha256(f"{_code()}:{limits.max_pixels}:{limits.max_duration_s}".encode()).hexdigest()[:16]
    return media.input_note(key, f"probe-{tag}.json")


def probe_noted(key: str, src: Path) -> Probe:
    """`probe_file(src)` of the stored input `key` (at `src`), from this
    host's note when a part before this one scanned it; a passing probe is
    noted for the parts after it. Two parts of one host asking at once
    scan once: the second waits for the first's note (a lock beside it,
    let go by the kernel if the first dies)."""
    note = _note(key)
    note.parent.mkdir(parents=True, exist_ok=True)
    with open(note.with_name(f"{note.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            probe = Probe.from_json(json.loads(note.read_bytes()))
            log.info("scan note %s read: no scan of this input here", note.name)
            return probe
        except FileNotFoundError:
            pass
        except (OSError, ValueError, TypeError) as exc:  # a note cut short or from elsewhere: scan again
            log.warning("scan note %s unreadable, scanning again: %r", note.name, exc)
        probe = probe_file(src)  # MediaError: refused, and noted nowhere
        note_passed(key, probe)
        return probe


def note_passed(key: str, probe: Probe) -> None:
    """Note `probe`, a whole-file probe of the stored input `key` that
    passed (never a header's), for the parts on this host."""
    note = _note(key)
    partial = note.with_name(f"{note.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        note.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(probe.as_json()))
        os.replace(partial, note)
        log.info("scan note %s written", note.name)
    except OSError as exc:  # a full scratch disk costs the next part a scan, nothing more
        log.warning("scan note %s not written: %r", note.name, exc)
        partial.unlink(missing_ok=True)
