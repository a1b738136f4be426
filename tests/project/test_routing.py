"""The router is the only place that decides lanes."""
from __future__ import annotations

import pytest

from project.celery import app
from project.lanes import Lane
from project.routing import TASK_LANES, UnroutedTaskError, lane_for, route_task


@pytest.mark.parametrize(
    ("task_name", "lane"),
    [
        ("transcoding.job_run", Lane.CPU_TRANSCODE),
        ("notify.job_finished", Lane.IO_NOTIFY),
        ("notify.job_playable", Lane.IO_NOTIFY),
        ("notify.deliver", Lane.IO_NOTIFY),
        ("exports.job_run", Lane.CPU_TRANSCODE),
        ("celery.backend_cleanup", Lane.IO_NOTIFY),
        ("bench.cpu.spin", Lane.CPU_TRANSCODE),
        ("bench.io.noop", Lane.IO_NOTIFY),
    ],
)
def test_each_task_goes_to_its_lane(task_name, lane):
    assert route_task(task_name, [], {}, {}) == {"queue": lane.value}


def test_an_unknown_task_fails_loudly_instead_of_using_the_default_queue():
    with pytest.raises(UnroutedTaskError):
        lane_for("uploads.typo_task")


def test_every_registered_project_task_has_a_lane_and_sets_no_queue_itself():
    app.loader.import_default_modules()
    ours = {name: task for name, task in app.tasks.items() if name.split(".")[0] in {"uploads", "transcoding"}}
    assert ours, "autodiscovery found no project tasks"
    for name, task in ours.items():
        assert name in TASK_LANES, name
        assert getattr(task, "queue", None) is None, f"{name} sets queue= and would bypass the router"


def test_lanes_are_declared_queues_and_missing_queues_are_not_created():
    declared = {q.name for q in app.conf.task_queues}
    assert declared == {lane.value for lane in Lane}
    assert app.conf.task_create_missing_queues is False
    assert app.conf.task_default_queue in declared
