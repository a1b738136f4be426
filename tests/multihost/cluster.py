"""The multi-host suite's shared world: a bridge, and on it the private
PostgreSQL, Redis and SeaweedFS every simulated host uses, started before
Django reads its settings (tests/services_plugin.py calls `start_shared`
when FAIRLANE_MULTIHOST=1, which bin/test sets for this suite's own pytest
run) and stopped at exit.

Web runs in the test's own (main) namespace: the test process's API client
(uploads, reads). Worker hosts are namespaces added by
the tests (tests/multihost/conftest.py).
"""
from __future__ import annotations

import atexit

from bench.private_services import Cluster

# Short leases and sweeps so that a lost host is noticed in seconds. The
# registration TTL is below the attempt lease's two thirds (see
# FAIR_WORKER_TTL_S in project/settings/), as in production.
CLUSTER_ENV = {
    "FAIRLANE_JOB_LEASE_S": "6",
    "FAIR_WORKER_TTL_S": "3",
    "FAIR_RUN_LEASE_S": "10",
    "FAIR_RECONCILE_S": "1",
    "FAIR_RECONCILE_MIN_AGE_S": "1",
    "FAIRLANE_RETRY_BASE_DELAY_S": "0.5",
    "FAIRLANE_RETRY_MAX_DELAY_S": "2",
    "FAIRLANE_SHUTDOWN_GRACE_S": "3",
    "PYTHONUNBUFFERED": "1",
    "LOG_FORMAT": "json",
}

# {"cluster", "network", "s3"} once started.
SHARED: dict = {}


def start_shared() -> dict[str, str]:
    """Start the bridge and the shared services; returns the environment
    every process of the run needs (this one and every host's)."""
    cluster = Cluster()
    SHARED.update(cluster=cluster, network=cluster.network, s3=cluster.s3)
    atexit.register(stop_shared)
    return {**cluster.env(), **CLUSTER_ENV}


def stop_shared() -> None:
    """Every host (its processes, namespace and link), the services, the bridge."""
    cluster = SHARED.pop("cluster", None)
    SHARED.clear()
    if cluster is not None:
        cluster.close()
