# Two commands do everything on a fresh machine with only Python 3.11:
#   make run    set up and start every Procfile process (web :8000, Flower :5555)
#   make test   set up and run the whole test suite (what .ci/run calls)
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test test-fast test-properties install bench-fairness bench-handover bench-redis-cost bench-gil-turns bench-cpu-slices bench-job-writes bench-media bench-notify bench-storage bench-scale bench-chunks bench-upload bench-isolation bench-web-server bench-estimates bench-ttfp-large clean stop

install: $(STAMP)

# Reinstalls only when requirements.txt changes, so a second `make` is fast.
$(STAMP): requirements.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $(STAMP)

run: install
	bin/run

test: install
	bin/test

# The fast part only: no real-worker or slow suites.
test-fast: install
	$(BIN)/pytest -m "not e2e and not slow and not chaos and not multihost" -q

# The property tests with fresh randomness: RUNS seeds (printed), EXAMPLES each.
# `make test` runs them derandomized; this is the longer, searching run.
test-properties: install
	RUNS=$(or $(RUNS),30) EXAMPLES=$(or $(EXAMPLES),200) bin/test-properties

bench-fairness: install
	$(BIN)/python -m bench.fairness

# Where a slot's time between two jobs goes under cost skew, plain Celery against Fairlane
bench-handover: install
	$(BIN)/python -m bench.handover

# The dispatcher's Redis instructions per job, this checkout against a baseline (valgrind)
bench-redis-cost: install
	$(BIN)/python -m bench.redis_cost $(ARGS)

# What a thread back from I/O waits for the GIL beside a computing one, by switch interval (seconds)
bench-gil-turns: install
	$(BIN)/python -m bench.gil_turns

# What a process waking on a busy core waits, at the kernel's CPU slice and
# at the short one the web asks for (project/cpu_slices.py).
bench-cpu-slices: install
	$(BIN)/python -m bench.cpu_slices

# A job's steps' WAL and database CPU, the job table's indexes before 5943707 / now (a few minutes)
bench-job-writes: install
	$(BIN)/python -m bench.job_writes

bench-media: install
	$(BIN)/python -m bench.media

# What object storage (SeaweedFS) costs a job against local disk
bench-storage: install
	$(BIN)/python -m bench.storage

# Webhook deliveries, fair versus FIFO; smaller: make bench-notify ARGS="--heavy 2000"
bench-notify: install
	$(BIN)/python -m bench.notify $(ARGS)

# Worker hosts as network namespaces, one core each (taskset): 1 versus 2
# hosts, a light user behind a flood, object storage against local disk. Root.
bench-scale: install
	$(BIN)/python -m bench.scale

# A long video in chunks: 1 versus 2 hosts (one core each), CPU overhead
# against one job, light users' waits behind it with chunking on and off.
# Root. The issue's size by default (10 min of 1080p); smaller, e.g.
# make bench-chunks ARGS="--seconds 32 --size 640x360 --chunk-s 4 --segment-s 2 --threshold-s 6 --light-users 6 --light-seconds 2"
bench-chunks: install
	$(BIN)/python -m bench.chunks $(ARGS)

# What a web host spends on uploads, tus through the web (main before issue
# 31) against direct to storage: 2,000 files of 50 KB and one 2 GiB file.
# Smaller: make bench-upload ARGS="--large-bytes 200000000"
bench-upload: install
	$(BIN)/python -m bench.upload $(ARGS)

# How far the batch finish estimate is from the real finish: 2,000 images
# and 200 short videos, alone and with a heavy user arriving half-way, on
# real workers (about an hour on a shared 2-core machine). Smaller:
# make bench-estimates ARGS="--images 400 --videos 40"
bench-estimates: install
	$(BIN)/python -m bench.estimates $(ARGS)

# One day of a Filestage-shaped workload on an autoscaled cluster, simulated
# through the dispatcher's own Lua on a private Redis: scale on jobs against
# worker-seconds, FIFO against fair, with and without scale-in protection.
# A few minutes. Shorter (no report written): make bench-autoscale ARGS="--hours 6"
.PHONY: bench-autoscale
bench-autoscale: install
	$(BIN)/python -m bench.autoscale $(ARGS)

# Whatever one user does within its bounds costs the others nothing: light
# users' submit-to-done quiet and beside a hostile user, Redis CPU per batch
# poll from 10 to 100,000 users with work, a 5,000-job cancel. Root
# (a private PostgreSQL). BENCH_ISOLATION_ROUNDS=1 for a shorter run.
bench-isolation: install
	$(BIN)/python -m bench.isolation $(ARGS)

# What a refused request costs the web host by WSGI server: gunicorn (the
# Procfile's before bin/web) against granian and uWSGI (installed into
# var/bench-tools for the run), a bare app and Fairlane's known refusal.
# A few minutes.
bench-web-server: install
	$(BIN)/python -m bench.web_server $(ARGS)

# Time to first playable: upload accepted -> first frame in Chromium through
# HLS, growing playlists against waiting for the finished ladder, 10 s and
# 60 s 1080p; ARGS="--long" adds a 10-minute source (chunked).
.PHONY: bench-ttfp
bench-ttfp: install
	$(BIN)/python -m bench.ttfp $(ARGS)

# The same for a ~4 GiB 1080p upload written as a phone writes it (moov at
# the end; 32 minutes), on object storage (a private SeaweedFS), sent
# straight into the store as the upload page sends it. The source is made
# once (bench/large_source.py, about a minute) and kept outside git in
# var/bench-sources/; the job is canceled after its first frame (its
# ladder would take hours). Needs ~15 GB free under /tmp.
LARGE_SOURCE := var/bench-sources/large-4gib.mp4
bench-ttfp-large: install
	$(BIN)/python -m bench.large_source $(LARGE_SOURCE) --gib 4
	$(BIN)/python -m bench.ttfp --storage s3 --source $(LARGE_SOURCE) --hosts 1 2 --flood 0 --fetch whole stream \
		--no-full-ladder --results ttfp-large $(ARGS)

# What copying a 1 and a 4 GiB input from object storage adds before a first frame
.PHONY: bench-fetch-large
bench-fetch-large: install
	$(BIN)/python -m bench.fetch_large

clean:
	rm -rf var/ $(VENV)

# Stop everything `make run` started, workers first (they hand back their
# jobs), then the embedded Redis and SeaweedFS (bin/stop).
stop:
	bin/stop
