"""Storage benchmark: `python -m bench.storage`. What object storage costs a
job against local disk. Writes bench/results/storage.json and prints a table.

One 1080p clip of BENCH_STORAGE_SECONDS (10 s) goes through the whole path
(bench.media's `_job`: the upload service stores it, the dispatcher
releases it, a real prefork worker copies it to scratch, probes, runs the
ladder, uploads every output, publishes) on two workers that differ only in
FAIRLANE_STORAGE: files on local disk (FileSystemStorage: the input is a
hard link, outputs are moved into place) and a private SeaweedFS over
loopback (S3: ranged download of the input, parallel uploads of the
outputs). Jobs alternate between the two, REPEATS of each. Reported, as
medians: what storage itself takes (the upload service storing the file,
measured as the call's time minus the job's, so with up to 0.25 s of the
waiting loop's polling; the worker's copy of the input to scratch and
upload of the outputs, from its log line), which does not depend on how busy the CPU is, and the
whole job (created_at -> finished_at), which on a shared machine varies
with ffmpeg's share of the CPU far more than storage adds.

A private Redis, a scratch SQLite database and SeaweedFS, all on this
machine and stopped at the end. About two minutes on 2 cores.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.harness import Environment, Worker
from bench.ports import free_ports

RESULTS = Path(__file__).resolve().parent / "results"
SECONDS = float(os.environ.get("BENCH_STORAGE_SECONDS", "10"))
REPEATS = int(os.environ.get("BENCH_STORAGE_REPEATS", "5"))


def main() -> None:
    env = Environment()
    from django.contrib.auth import get_user_model
    from django.test import override_settings

    from bench.media import SOURCE_ARGS, SOURCE_SIZE, _job
    from bench.private_services import s3_settings
    from project import embedded_seaweedfs
    from tests.media import make_video

    work = Path(tempfile.mkdtemp(prefix="bench-storage-"))
    ports = dict(zip(embedded_seaweedfs.PORT_FLAGS, free_ports(len(embedded_seaweedfs.PORT_FLAGS))))
    server, s3_proc = embedded_seaweedfs.spawn(work / "s3", ports)
    s3_env = server.env()
    backends = {
        "filesystem": ({"FAIRLANE_STORAGE": "filesystem"}, {}),
        "s3": (s3_env, s3_settings(s3_env)),
    }
    workers = {name: Worker("cpu-transcode", pool="prefork", concurrency=1, name=f"cpu-{name}", log_dir=work,
                            loglevel="INFO", env={**worker_env, "LOG_FORMAT": "plain",
                                                  "FAIRLANE_SCRATCH_DIR": str(work / f"scratch-{name}")})
               for name, (worker_env, _) in backends.items()}
    runs: dict[str, list[dict]] = {name: [] for name in backends}
    finished = False
    try:
        src = make_video(work / "src.mp4", seconds=SECONDS, size=SOURCE_SIZE, video_args=SOURCE_ARGS)
        src_bytes = src.stat().st_size
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
                    started = time.monotonic()
                    run = _job(src, owner)
                    # _job stores the file (the request's work) and waits for the job.
                    run["store_upload_s"] = time.monotonic() - started - run["job_s"]
                    runs[name].append(run)
        for name, worker in workers.items():
            timings = TRANSCODED.findall(worker.log.read_text())[1:]  # without the warm-up
            for run, (fetch_s, upload_s) in zip(runs[name], timings):
                run.update(fetch_s=float(fetch_s), upload_s=float(upload_s))
        finished = True
    finally:
        for worker in workers.values():
            worker.stop()
        s3_proc.terminate()
        s3_proc.wait(30)
        if finished:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"workers' logs kept in {work}")
        env.close()
    phases = ("store_upload_s", "fetch_s", "upload_s", "job_s")
    med = {name: {k: round(statistics.median(r[k] for r in rs), 3) for k in phases} for name, rs in runs.items()}
    for m in med.values():
        m["storage_s"] = round(m["store_upload_s"] + m["fetch_s"] + m["upload_s"], 3)
    result = {
        "cores": os.cpu_count(), "load_after": os.getloadavg()[0], "repeats": REPEATS,
        "clip": f"{SOURCE_SIZE} {SECONDS:g} s h264 CRF 18 + aac, {src_bytes} bytes",
        "median_s": med, "storage_overhead_s": round(med["s3"]["storage_s"] - med["filesystem"]["storage_s"], 3),
        "storage_overhead_pct_of_job": round(
            100 * (med["s3"]["storage_s"] - med["filesystem"]["storage_s"]) / med["filesystem"]["job_s"], 2),
        "runs": runs,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "storage.json").write_text(json.dumps(result, indent=2) + "\n")
    print(f"{result['clip']}, {REPEATS} jobs each, alternating; medians in seconds")
    print("backend    | store upload | fetch input | upload outputs | storage | whole job")
    for name, m in med.items():
        print(f"{name:<10} | {m['store_upload_s']:>12.3f} | {m['fetch_s']:>11.3f} | {m['upload_s']:>14.3f} | "
              f"{m['storage_s']:>7.3f} | {m['job_s']:>9.2f}")
    print(f"object storage adds {result['storage_overhead_s']:+.3f} s of storage work per job "
          f"({result['storage_overhead_pct_of_job']:+.1f} % of the job on local disk)")


# The worker's log line for a finished transcode (transcoding/services.py).
TRANSCODED = re.compile(r"transcoded: \w+, \d+ outputs in [\d.]+ s \(fetch ([\d.]+) s, upload ([\d.]+) s\)")


def _consume(worker: Worker, on: bool) -> None:
    from project.celery import app

    command = app.control.add_consumer if on else app.control.cancel_consumer
    command(worker.lane, destination=[worker.name], reply=True, timeout=5)


if __name__ == "__main__":
    main()
