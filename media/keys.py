"""Object keys. Every key is generated here and never reused: uploads get a
random name (uuid4: unguessable, and nothing about the client's filename
reaches the store), outputs live under their attempt's own prefix, so a
replaced attempt can never overwrite the winner's objects and deleting an
attempt is deleting a prefix."""
from __future__ import annotations

import uuid


def upload_key(*, owner_id: int, group: str = "") -> str:
    """`group`: uploads created together share a prefix, so that the store
    lists all of them in one call (uploads/direct.py completes them so)."""
    return f"uploads/{owner_id}/{group}/{uuid.uuid4().hex}" if group else f"uploads/{owner_id}/{uuid.uuid4().hex}"


def job_prefix(*, job_id: str) -> str:
    return f"outputs/{job_id}/"


def outputs_prefix(*, job_id: str, attempt: int) -> str:
    return f"outputs/{job_id}/{attempt}/"


def exports_prefix(*, job_id: str) -> str:
    return f"exports/{job_id}/"


def export_key(*, job_id: str, token: str, filename: str) -> str:
    """Where an export's ZIP is assembled (a multipart upload that several
    attempts continue) and then published from: one token per upload."""
    return f"{exports_prefix(job_id=job_id)}{token}/{filename}"
