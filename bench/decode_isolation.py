"""What running the decoders in a child costs: `python -m bench.decode_isolation [pairs]`.

For each file, the same work in this process and through
transcoding/sandbox.py (a fork of the warm fork server, limits, the result
pickled back), in interleaved pairs; prints the median of the pairs'
differences (this shared machine's load moves single runs by more than the
difference), the fork server's start-up time and its resident size.
"""
from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _pairs(inline, isolated, *, pairs: int, scratch: Path) -> tuple[float, float, float]:
    """Medians (ms) of the inline runs, the isolated runs and their differences."""
    times: dict[str, list[float]] = {"inline": [], "isolated": []}
    for i in range(pairs):
        order = (("inline", inline), ("isolated", isolated))
        for name, work in order if i % 2 == 0 else order[::-1]:
            workdir = scratch / "work"
            shutil.rmtree(workdir, ignore_errors=True)
            workdir.mkdir()
            started = time.perf_counter()
            work(workdir)
            times[name].append((time.perf_counter() - started) * 1000)
    differences = [b - a for a, b in zip(times["inline"], times["isolated"])]
    return statistics.median(times["inline"]), statistics.median(times["isolated"]), statistics.median(differences)


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    import django

    django.setup()
    import pypdfium2
    from PIL import Image

    from tests.media import make_video
    from transcoding import images, pipelines, probe, sandbox

    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 21
    scratch = Path(tempfile.mkdtemp(prefix="bench-isolation-"))
    try:
        photo = scratch / "photo.jpg"
        Image.effect_noise((4000, 3000), 40).convert("RGB").save(photo, quality=88)  # a 12 MP phone photo
        document = scratch / "letter.pdf"
        pdf = pypdfium2.PdfDocument.new()
        pdf.new_page(595, 842)
        pdf.save(str(document))
        clip = make_video(scratch / "clip.mp4", seconds=3, size="1280x720")
        limits = probe.configured_limits()
        started = time.perf_counter()
        sandbox.run(time.sleep, 0, timeout_s=60, memory_bytes=2**30)
        print(f"fork server start-up: {(time.perf_counter() - started) * 1000:.0f} ms")
        budget = {"timeout_s": 600, "memory_bytes": 2**31}
        cases = {
            "probe of a 12 MP JPEG": (lambda w: probe._probe(photo, limits), lambda w: probe.probe_file(photo)),
            "still-image variants of it": (lambda w: images.still(photo, w, limits),
                                           lambda w: sandbox.run(images.still, photo, w, limits, **budget)),
            "probe of a 3 s 720p clip": (lambda w: probe._probe(clip, limits), lambda w: probe.probe_file(clip)),
            "PDF thumbnail (A4)": (lambda w: pipelines.pdf_thumbnail(document, w),
                                   lambda w: sandbox.run(pipelines.pdf_thumbnail, document, w, **budget)),
        }
        print(f"{'':30} {'in process':>11} {'in a child':>11} {'difference':>11}   (medians of {pairs} pairs, ms)")
        for name, (inline, isolated) in cases.items():
            a, b, d = _pairs(inline, isolated, pairs=pairs, scratch=scratch)
            print(f"{name:30} {a:11.1f} {b:11.1f} {d:+11.1f}")
        with open(f"/proc/{sandbox._server.proc.pid}/status") as status:
            rss = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
        print(f"fork server resident: {rss / 1024:.0f} MiB; load average {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
