"""Storage benchmark: `python -m bench.storage`. What object storage costs a
job against local disk. Writes bench/results/storage.json and prints a table.

One 1080p clip of BENCH_STORAGE_SECONDS (10 s) goes through the whole path
(bench.media's `_job`: the upload service stores it, the dispatcher
releases it, a real prefork worker copies it to scratch, probes, runs the
ladder, uploads every output, publishes) on two workers that differ only in
FAIRLANE_STORAGE: files on local disk (FileSystemStorage: the input is a
hard link, outputs are moved into place) and a private SeaweedFS over
loopback (S3: ranged download of the input, parallel uploads of the
outputs). Jobs alternate between the two, REPEATS of each; medians of the
row's created_at -> finished_at.

A private Redis, a scratch SQLite database and SeaweedFS, all on this
machine and stopped at the end. About two minutes on 2 cores.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import tempfile
from pathlib import Path

from bench.harness import Environment, Worker

RESULTS = Path(__file__).resolve().parent / "results"
SECONDS = float(os.environ.get("BENCH_STORAGE_SECONDS", "10"))
REPEATS = int(os.environ.get("BENCH_STORAGE_REPEATS", "5"))


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def main() -> None:
    env = Environment()
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.test import override_settings

    from bench.media import SOURCE_ARGS, SOURCE_SIZE, _job
    from project import embedded_seaweedfs
    from project.settings import s3_storages
    from tests.media import make_video

    work = Path(tempfile.mkdtemp(prefix="bench-storage-"))
    ports = dict(zip(embedded_seaweedfs.PORT_FLAGS, _free_ports(len(embedded_seaweedfs.PORT_FLAGS))))
    server, s3_proc = embedded_seaweedfs.spawn(work / "s3", ports)
    s3_env = server.env()
    backends = {
        "filesystem": ({"FAIRLANE_STORAGE": "filesystem"}, {}),
        "s3": (s3_env, {"FAIRLANE_STORAGE": "s3", "STORAGES": {**settings.STORAGES, **s3_storages(s3_env)}}),
    }
    workers = {name: Worker("cpu-transcode", pool="prefork", concurrency=1, name=f"cpu-{name}", log_dir=work,
                            env={**worker_env, "FAIRLANE_SCRATCH_DIR": str(work / f"scratch-{name}")})
               for name, (worker_env, _) in backends.items()}
    runs: dict[str, list[dict]] = {name: [] for name in backends}
    try:
        src = make_video(work / "src.mp4", seconds=SECONDS, size=SOURCE_SIZE, video_args=SOURCE_ARGS)
        owner = get_user_model().objects.create_user("bench-storage")
        for name, worker in workers.items():
            worker.wait_ready()
            # Only this backend's worker consumes while its job runs.
            for other in workers.values():
                if other is not worker:
                    _consume(other, False)
            with override_settings(**backends[name][1]):
                _job(src, owner)  # warm-up: imports, connections
            for other in workers.values():
                _consume(other, True)
        for _ in range(REPEATS):
            for name, worker in workers.items():
                for other in workers.values():
                    _consume(other, other is worker)
                with override_settings(**backends[name][1]):
                    runs[name].append(_job(src, owner))
    finally:
        for worker in workers.values():
            worker.stop()
        s3_proc.terminate()
        s3_proc.wait(30)
        shutil.rmtree(work, ignore_errors=True)
        env.close()
    med = {name: statistics.median(r["job_s"] for r in rs) for name, rs in runs.items()}
    pairs = [(s["job_s"] - f["job_s"]) / f["job_s"] for f, s in zip(runs["filesystem"], runs["s3"])]
    result = {
        "cores": os.cpu_count(), "clip": f"{SOURCE_SIZE} {SECONDS:g} s h264 CRF 18 + aac", "repeats": REPEATS,
        "job_s": {name: round(v, 3) for name, v in med.items()},
        "overhead_s": round(med["s3"] - med["filesystem"], 3),
        "overhead_pct": round(100 * statistics.median(pairs), 2),
        "runs_s": {name: [round(r["job_s"], 3) for r in rs] for name, rs in runs.items()},
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "storage.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"{result['clip']}, {REPEATS} jobs each, alternating (median created -> finished):")
    print(f"  local disk (FileSystemStorage): {med['filesystem']:.2f} s")
    print(f"  SeaweedFS over loopback (S3):   {med['s3']:.2f} s")
    print(f"  object storage costs {result['overhead_s']:+.2f} s ({result['overhead_pct']:+.1f} %, median of pairs)")


def _consume(worker: Worker, on: bool) -> None:
    from project.celery import app

    command = app.control.add_consumer if on else app.control.cancel_consumer
    command(worker.lane, destination=[worker.name], reply=True, timeout=5)


if __name__ == "__main__":
    main()
