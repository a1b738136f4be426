"""What the fair dispatcher holds of a job, asked as the uploads tests ask
it: whether a cancel withdrew it, a retry or schedule handed it over."""
from __future__ import annotations

import uuid

import dispatcher
from project.lanes import Lane


def held(job) -> str | None:
    """The job's state in the transcode lane's dispatcher ("delayed" until
    it is due), or None when it holds none; `job` a Job or its id."""
    job_id = job if isinstance(job, (str, uuid.UUID)) else job.id
    return dispatcher.scheduler(Lane.CPU_TRANSCODE).known(str(job_id))
