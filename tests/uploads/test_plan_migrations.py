"""The plan-bounds migrations repair the rows that break the bounds before
adding the constraints (on PostgreSQL, adding a constraint that an existing
row breaks fails the deploy), keeping what each value meant."""
from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

def _named(suffix: str) -> tuple[str, str]:
    """The migration whose name ends with `suffix` (numbers change when branches merge)."""
    graph = MigrationExecutor(connection).loader.graph
    [node] = [node for node in graph.nodes if node[1].endswith(suffix)]
    return node


def _before(suffix: str) -> tuple[str, str]:
    """What the migration named `suffix` comes right after in its own app."""
    graph = MigrationExecutor(connection).loader.graph
    node = _named(suffix)
    [parent] = [p for p in graph.node_map[node].parents if p.key[0] == node[0]]
    return parent.key


def migrate(targets=None):
    """Migrate to `targets` (default: the latest), returning those models."""
    executor = MigrationExecutor(connection)
    targets = targets or executor.loader.graph.leaf_nodes()
    executor.migrate(targets)
    executor.loader.build_graph()
    return executor.loader.project_state(targets).apps


def test_bad_plans_and_rate_limits_are_repaired_and_then_constrained():
    apps = migrate([_before("_profile_plan_repair"), _before("_endpoint_rate_repair")])
    try:
        User = apps.get_model("auth", "User")
        Profile, Endpoint = apps.get_model("uploads", "Profile"), apps.get_model("notify", "Endpoint")
        rows = {}
        for name, plan in {
            "tiny": {"weight": 1e-300, "transcode_cap": 0, "notify_cap": 0, "notify_rate_per_s": 0.0},
            "huge": {"weight": 1e6, "transcode_cap": 10**6, "notify_rate_per_s": 1e9, "notify_burst": 10**6},
            "broken": {"notify_rate_per_s": -3.0, "notify_burst": 0},
            "fine": {"weight": 2.0, "transcode_cap": 4, "notify_rate_per_s": 5.0, "notify_burst": 6},
        }.items():
            user = User.objects.create(username=name)
            rows[name] = Profile.objects.create(user=user, **plan).pk
            Endpoint.objects.create(owner=user, url=f"https://{name}.example/", events=[], secret="s",
                                    rate_per_s=plan.get("notify_rate_per_s"), burst=plan.get("notify_burst"))
        apps = migrate([_named("_profile_plan_bounds"), _named("_endpoint_rate_bounds")])
        Profile, Endpoint = apps.get_model("uploads", "Profile"), apps.get_model("notify", "Endpoint")
        fields = ("weight", "transcode_cap", "notify_cap", "notify_rate_per_s", "notify_burst")
        plans = {name: Profile.objects.filter(pk=pk).values_list(*fields).get() for name, pk in rows.items()}
        assert plans == {
            "tiny": (0.01, None, None, None, 10),
            "huge": (100.0, 10_000, None, 10_000.0, 10_000),
            "broken": (1.0, None, None, None, 10),
            "fine": (2.0, 4, None, 5.0, 6),
        }
        limits = dict(Endpoint.objects.values_list("url", "rate_per_s"))
        assert limits == {"https://tiny.example/": None, "https://huge.example/": 10_000.0,
                          "https://broken.example/": None, "https://fine.example/": 5.0}
        assert Endpoint.objects.get(url="https://broken.example/").burst == 1
    finally:
        migrate()
