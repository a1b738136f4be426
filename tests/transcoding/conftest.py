"""Pipelines called directly on generated files: no database, no workers."""
from __future__ import annotations

from pathlib import Path

import pytest

from transcoding import pipelines
from transcoding.probe import probe_file
from transcoding.produced import Produced


@pytest.fixture
def transcode(tmp_path: Path):
    """Probe a file and run its pipeline into a fresh work directory; returns
    {output name: (absolute path, Produced)}."""

    def run(src: Path) -> dict[str, tuple[Path, Produced]]:
        workdir = tmp_path / f"work-{src.stem}"
        workdir.mkdir()
        probe = probe_file(src)
        produced = pipelines.PIPELINES[probe.kind](src, workdir, probe, lambda pct: None)
        return {p.name: (workdir / p.filename, p) for p in produced}

    return run
