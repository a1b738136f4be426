"""Shared fixtures: real services only.

Redis: `REDIS_URL` from the environment when set (the Makefile points it at
the machine's Redis for the PostgreSQL run), otherwise the embedded
valkey-server that tests/services_plugin.py started for this run.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import settings as hypothesis_settings

# Fixtures of their own module, for the tests of more than one folder:
# `flower` (Flower started as bin/flower starts it).
pytest_plugins = ["tests.flower"]

# Property tests (Hypothesis). `ci`, the default: derandomized, so `make test`
# draws the same examples on every run and cannot fail by luck. `explore`:
# fresh randomness, for `make test-properties`, which runs it with many seeds
# and prints each; a failure reproduces with
# `pytest --hypothesis-profile=explore --hypothesis-seed=<seed> <test>`.
# No example database: nothing is written into the work tree.
EXAMPLES = int(os.environ.get("HYPOTHESIS_MAX_EXAMPLES", "200"))
hypothesis_settings.register_profile("ci", derandomize=True, database=None, max_examples=EXAMPLES, print_blob=True)
hypothesis_settings.register_profile("explore", derandomize=False, database=None, max_examples=EXAMPLES,
                                     print_blob=True)
hypothesis_settings.load_profile("ci")


@pytest.fixture(scope="session", autouse=True)
def _quick_password_hashes():
    """Passwords the tests set are hashed with 1,000 PBKDF2 iterations, not
    Django's 1,000,000 (0.24 s each: a page's 25 people took 6 s to make).
    The same algorithm name, with the count stored in the hash, so that
    every process verifies them, the web servers and workers the tests
    start included; the product's own hashing is untouched."""
    from django.conf import settings
    from django.contrib.auth import hashers

    # Set on the settings themselves, not through override_settings: a
    # session-long override wraps the settings object, and Celery's view of
    # the Django settings (its CELERY_ namespace) then misses attributes.
    before = settings.PASSWORD_HASHERS
    settings.PASSWORD_HASHERS = ["tests.hashers.QuickPBKDF2PasswordHasher", *before]
    hashers.get_hashers.cache_clear()
    hashers.get_hashers_by_algorithm.cache_clear()
    yield
    settings.PASSWORD_HASHERS = before
    hashers.get_hashers.cache_clear()
    hashers.get_hashers_by_algorithm.cache_clear()


@pytest.fixture(autouse=True)
def _event_stream_labels_forgotten():
    """The event stream's labels are cached per process by key (a user's
    or an organisation's id); ids are used again by later tests (SQLite
    reuses them after a rollback), so each test starts without them."""
    from dispatcher import monitor

    monitor.owner_label.cache_clear()
    monitor.group_label.cache_clear()


@pytest.fixture(scope="session", autouse=True)
def _teardown_flush_outlives_a_deadlock():
    """The flush after each transactional test is run again when PostgreSQL
    makes it the victim of a deadlock with a worker's commit (tests/flush.py)."""
    from django.test import TransactionTestCase

    from tests.flush import retried_on_deadlock

    original = TransactionTestCase._fixture_teardown
    TransactionTestCase._fixture_teardown = retried_on_deadlock(original)
    yield
    TransactionTestCase._fixture_teardown = original


@pytest.fixture(scope="session")
def redis_url() -> str:
    """Set by tests/services_plugin.py or by the caller's environment."""
    return os.environ["REDIS_URL"]


@pytest.fixture
def redis_client(redis_url: str) -> redis.Redis:
    """A client on a database emptied before each test."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    return client


@pytest.fixture
def private_redis() -> Iterator[redis.Redis]:
    """A Redis server of the test's own, for counting its commands: the
    server-wide INFO commandstats of the run's Redis also counts whatever
    else talks to that server meanwhile (a fresh clone's run once counted
    three HMGETs more than the test made)."""
    from bench.ports import free_port
    from project import embedded_redis

    data_dir, port = Path(tempfile.mkdtemp(prefix="fairlane-private-redis-")), free_port()
    proc = embedded_redis.spawn(data_dir, port, persist=False)
    try:
        yield redis.Redis(port=port)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(autouse=True)
def _api_rates_fresh():
    """Each test starts with no API request counted against anyone's rate
    (uploads/throttling.py): user ids come back in every test on SQLite, and
    the run's Redis outlives them, so one test's requests would otherwise
    count against the next test's user of the same id."""
    from django.conf import settings

    from uploads.throttling import KEY_PREFIX, known_refusals, known_users

    known_refusals.clear()  # and what this process remembers of them
    known_users.clear()
    client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2, socket_connect_timeout=2)
    try:
        keys = list(client.scan_iter(match=f"{KEY_PREFIX}*", count=1000))
        if keys:
            client.delete(*keys)
    except redis.RedisError:  # a test of a Redis outage: nothing could have been counted
        pass
    finally:
        client.close()


@pytest.fixture(autouse=True)
def _workers_settle(request):
    """After a test that ran real workers, wait (briefly, bounded) until
    they have stopped writing: no job running, no delivery being sent,
    nothing in flight in either lane. Otherwise the next thing to touch the
    database is pytest-django's flush (TRUNCATE of every table), racing a
    worker still recording this test's last job: PostgreSQL resolves the
    two as a deadlock and the flush fails. Its teardown runs before the
    flush (pytest-django's database fixture is set up first)."""
    yield
    if "workers" not in request.fixturenames:
        return
    import warnings

    from tests.workers import wait_settled

    if not wait_settled(timeout_s=60):
        warnings.warn(f"{request.node.nodeid} left the workers busy for a minute", stacklevel=1)


@pytest.fixture
def live_mail_dir() -> Path:
    """The email file backend's folder, emptied: the suites that run real
    workers (chaos, multi-host) count the notifications mailed there."""
    from django.conf import settings

    path = Path(settings.EMAIL_FILE_PATH)
    path.mkdir(parents=True, exist_ok=True)
    for old in path.glob("*"):
        old.unlink()
    return path


@pytest.fixture
def cpu_lane_paused(redis_client):
    """For tests that publish into cpu-transcode while the session's real
    workers may be up: nothing consumes the lane inside the test, so a job
    whose row the workers cannot see (the test's transaction) is not taken
    and dropped by them; what the test left queued is emptied at the end."""
    from tests.workers import lane_paused

    with lane_paused("cpu-transcode"):
        yield
        redis_client.flushdb()


@pytest.fixture(scope="session")
def workers(django_db_setup, django_db_blocker, tmp_path_factory):
    """Real Celery workers for both lanes, against the test database."""
    from tests.workers import Workers

    pool = Workers(tmp_path_factory.mktemp("worker-logs"))
    try:
        pool.wait_ready()
        yield pool
    finally:
        pool.stop()


# Low enough that a 16 s clip is four chunks of two 2 s segments.
CHUNKING_ENV = {"FAIRLANE_CHUNK_THRESHOLD_S": "6", "FAIRLANE_CHUNK_S": "4", "FAIRLANE_HLS_SEGMENT_S": "2",
                # on object storage, a long video's first chunk reads its upload as it arrives, small as it is
                "FAIRLANE_STREAM_INPUT_BYTES": "0"}


@pytest.fixture(scope="module")
def chunking_workers(django_db_setup, django_db_blocker, tmp_path_factory):
    """Workers of their own that chunk short videos (CHUNKING_ENV); the
    session's workers (when up) stop consuming the cpu lane meanwhile, so no
    job of the module reaches a worker with the default thresholds."""
    from tests.workers import Workers, lane_paused

    with lane_paused("cpu-transcode"):
        pool = Workers(tmp_path_factory.mktemp("chunk-worker-logs"), env=CHUNKING_ENV, suffix="chunking")
        try:
            pool.wait_ready()
            yield pool
        finally:
            pool.stop()


@pytest.fixture
def make_user(db):
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    def make(username: str, **fields):
        user = get_user_model().objects.create_user(username=username, email=f"{username}@example.com", **fields)
        Token.objects.create(user=user)
        return user

    return make


@pytest.fixture
def api_client_for():
    from rest_framework.test import APIClient

    def client_for(user) -> APIClient:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {user.auth_token.key}")
        return client

    return client_for


@pytest.fixture
def s3_storage(settings) -> dict:
    """The S3 backend against the run's private SeaweedFS, in a bucket of
    its own, for the tests of object storage itself, whichever backend the
    run uses by default (in this process only: workers keep the run's)."""
    from project.embedded_seaweedfs import Server, _client
    from project.settings import s3_storages
    from tests.services_plugin import seaweedfs_server

    server = seaweedfs_server()
    bucket = f"test-{uuid.uuid4().hex[:12]}"
    _client(Server(**{**server.__dict__, "bucket": bucket})).create_bucket(Bucket=bucket)
    env = {**server.env(), "FAIRLANE_S3_BUCKET": bucket}
    settings.FAIRLANE_STORAGE = "s3"
    settings.STORAGES = {**settings.STORAGES, **s3_storages(env)}
    return env


@pytest.fixture
def filesystem_storage(settings, tmp_path) -> Path:
    """FileSystemStorage under a private MEDIA_ROOT, whichever backend the
    run uses by default (in this process only)."""
    settings.FAIRLANE_STORAGE = "filesystem"
    settings.STORAGES = {**settings.STORAGES, "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"}}
    settings.MEDIA_ROOT = str(tmp_path / "media")
    return tmp_path / "media"


@pytest.fixture(params=["filesystem", "s3"])
def storage_backend(request, settings, tmp_path) -> str:
    """Run the test once per storage backend (this process only), with its
    own media (a private MEDIA_ROOT, or a bucket of its own) and scratch."""
    settings.FAIRLANE_SCRATCH_DIR = tmp_path / "scratch"
    request.getfixturevalue(f"{request.param}_storage")
    return request.param
