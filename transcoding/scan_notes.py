"""A video's whole-file probe once per host, not once per part.

Why: every part of a chunked video (transcoding/chunks.py) probed the whole
source before encoding its piece, and the probe's packet scan reads every
packet: about 6.8 s of a core for a 4 GB source, so a video of 61 parts
was scanned 61 times across its hosts. The object under an upload key never
changes (media/keys.py), so neither does what the scan says of it: the first
part on a host to scan it (or the first chunk, which scans beside its
encode, or the split, which scanned it whole) leaves the probe as a note
beside the host's copy of the input (media.input_note: its lock, so two
parts asking at once scan once), and the other parts on that host read it.

Only a probe that passed is noted: a refused file fails its part, and the
video with it. A note names the probe's code and limits it came from, so a
deploy or a settings change that alters what the probe refuses scans again.
A note that cannot be read as a probe is ignored (scanned again).
"""
from __future__ import annotations

import hashlib
import json
from functools import cache
from pathlib import Path

import media
from transcoding import probe as probe_module
from transcoding.probe import Probe, configured_limits, probe_file


@cache
def _code() -> str:
    """What the probe decides by: its module's source, hashed once per process."""
    digest = hashlib.sha256(Path(probe_module.__file__).read_bytes())
    return digest.hexdigest()[:16]


def note_name() -> str:
    """The note's name under this probe code and the configured limits."""
    limits = configured_limits()
    tag = hashlib.sha256(f"{_code()}:{limits.max_pixels}:{limits.max_duration_s}".encode()).hexdigest()[:16]
    return f"probe-{tag}.json"


def _parse(data: bytes) -> Probe:
    return Probe.from_json(json.loads(data))


def _noted(key: str, make) -> Probe:
    return media.input_note(key, note_name(), lambda: json.dumps(make().as_json()).encode(), _parse)


def probe_noted(key: str, src: Path) -> Probe:
    """`probe_file(src)` of the stored input `key` (at `src`), from this
    host's note when a part before this one scanned it; a passing probe is
    noted for the parts after it (MediaError: refused, noted nowhere)."""
    return _noted(key, lambda: probe_file(src))


def note_passed(key: str, probe: Probe) -> None:
    """Note `probe`, a whole-file probe of the stored input `key` that
    passed (never a header's), for the parts on this host."""
    _noted(key, lambda: probe)
