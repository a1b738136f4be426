"""A held job's Celery message, built at submit and pushed into the lane's
queue by the release script itself.

Release is then one Lua call that also publishes: no round trip back to
Python, no kombu producer on the hot path, and release-and-publish are
atomic (a process dying between the two can no longer leave a job released
but never published). The price is that the message must be exactly what
kombu's Redis transport would push: `build` follows celery.app.amqp's
`send_task_message` and kombu's `Producer.publish` / virtual
`Channel.basic_publish` step by step, and tests/dispatcher/test_message.py
compares the result with what `send_task` pushes on the installed kombu, so
an upgrade that changes the format fails there, not in production.

Each release needs a message id of its own (`<job id>@<release tag>`):
Celery remembers revoked ids for hours and drops every message carrying one,
so a later run of the same job must not reuse an id. The message is stored
with RELEASE_TAG where the id's suffix goes (task id, root id, correlation
id, delivery tag) and the release script replaces it with the release's
time in microseconds on Redis's clock (lua/_lib.lua, `release`), unless
the submitter chose the tag of the first release (`new_tag`) so that it could
announce the message id before the message exists (dispatcher/monitor.py).
"""
from __future__ import annotations

import base64
import functools
import json
import os
import re
import secrets
from typing import NamedTuple

from celery import Celery
from kombu.serialization import dumps as serialize
from kombu.utils.encoding import str_to_bytes

# Not in base64's alphabet nor escaped by JSON nor a Lua pattern character:
# it can only appear where build() put it.
RELEASE_TAG = "~release~"
# kombu.transport.virtual.Channel.body_encoding
_BODY_ENCODING = "base64"


class Built(NamedTuple):
    queue: str  # the Redis list the message goes to
    body: str  # the message as kombu's Redis transport stores it, RELEASE_TAG where its id's suffix goes
    event: dict  # the fields of Celery's task-sent event for it (uuid with RELEASE_TAG too)


def new_tag() -> str:
    """A tag for a message id chosen by its submitter: random, and never of
    the release's own form (digits only), so never an id used before."""
    return "s" + secrets.token_hex(6)


# Where a job's id and its body go in a message template (below): as
# RELEASE_TAG, never escaped and never produced by the encodings around it.
_JOB = "~job~"
_BODY = "~body~"
# Ids that JSON and repr() both write as they are, so that putting one where
# _JOB stands gives exactly what building with it would.
_PLAIN_ID = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
# Celery cuts an argument list's repr at 1,024 characters (argsrepr); a
# template's must stay clear of that with any id in place of _JOB.
_TEMPLATE_MAX_CHARS = 512


def build(app: Celery, task_name: str, args: list, *, job_id: str, headers: dict, options: dict) -> Built:
    """The stored message for `task_name(*args)` as job `job_id`, with extra
    `headers` and Celery call `options` (time limits).

    The jobs of a batch differ only in their ids: Celery's message for the
    first (with _JOB for the id) is kept as a template, and the next ones
    are that text with their id and their own body put in, a few string
    operations instead of Celery's and kombu's whole path (a fifth of a
    2,000-file claim's web CPU in bench-upload). Whatever a template could
    not reproduce exactly (an id needing an escape, _JOB already in the
    arguments or headers, a long argument list, a job submitted by a
    running task, whose message names its parent) takes the whole path."""
    shape = [_JOB if arg == job_id else arg for arg in args]
    try:
        spec = json.dumps([shape, headers, options], sort_keys=True)
    except TypeError:  # not JSON: no template
        spec = ""
    if (not spec or app.current_worker_task or not _PLAIN_ID.fullmatch(job_id)
            or spec.count(_JOB) != shape.count(_JOB) or _BODY in spec
            or len(spec) + 100 * shape.count(_JOB) > _TEMPLATE_MAX_CHARS
            or json.loads(spec) != [shape, headers, options]):  # JSON would change a value (a tuple, a key)
        return _build(app, task_name, args, job_id=job_id, headers=headers, options=options)[0]
    queue, kwargs, embed, stored, event = _template(app, os.getpid(), app.thread_oid, task_name, spec)
    _, _, body = serialize((args, kwargs, embed), serializer=app.conf.task_serializer)
    encoded = base64.b64encode(str_to_bytes(body)).decode()  # kombu's encode_body
    return Built(queue, stored.replace(_JOB, job_id).replace(_BODY, encoded), json.loads(event.replace(_JOB, job_id)))


@functools.lru_cache(maxsize=256)
def _template(app: Celery, pid: int, thread_oid: str, task_name: str, spec: str) -> tuple[str, dict, dict, str, str]:
    """The message of `spec` ([args with _JOB for the id, headers, options])
    as text with _JOB and _BODY to fill in, and what its body holds besides
    the arguments. Per process and thread: the message names both (its
    origin, its reply queue)."""
    shape, headers, options = json.loads(spec)
    built, (_, kwargs, embed) = _build(app, task_name, shape, job_id=_JOB, headers=headers, options=options)
    envelope = json.loads(built.body)
    envelope["body"] = _BODY
    return built.queue, kwargs, embed, json.dumps(envelope), json.dumps(built.event)


def _build(app: Celery, task_name: str, args: list, *, job_id: str, headers: dict,
           options: dict) -> tuple[Built, tuple]:
    """Celery's and kombu's whole path: the message `build` describes, and
    the body it encoded ((args, kwargs, embed), Celery's protocol 2)."""
    options = dict(options)
    time_limit, soft_time_limit = options.pop("time_limit", None), options.pop("soft_time_limit", None)
    routed = app.amqp.router.route(options, task_name, args, {}, app.tasks.get(task_name))
    queue = routed.pop("queue")
    if routed or queue.exchange.type != "direct":
        raise ValueError(f"{task_name}: only plain direct-queue routing can be pre-built, not {routed or queue}")
    task_id = f"{job_id}@{RELEASE_TAG}"
    root_id = parent_id = None
    parent = app.current_worker_task  # a job submitted by a task: as apply_async, it is that task's child
    if parent:
        root_id, parent_id = parent.request.root_id or parent.request.id, parent.request.id
    message = app.amqp.create_task_message(
        task_id, task_name, args, {}, reply_to=app.thread_oid, time_limit=time_limit,
        soft_time_limit=soft_time_limit, root_id=root_id, parent_id=parent_id, ignore_result=None,
        create_sent_event=True,
    )
    content_type, content_encoding, body = serialize(message.body, serializer=app.conf.task_serializer)
    properties = {
        **message.properties,
        "delivery_mode": 2,  # kombu: 'persistent', the default delivery mode
        "delivery_info": {"exchange": "", "routing_key": queue.name},  # direct: the queue itself
        "priority": 0,
        "body_encoding": _BODY_ENCODING,
        "delivery_tag": task_id,  # any unique string; kombu uses a uuid
    }
    envelope = {
        "body": base64.b64encode(str_to_bytes(body)).decode(),  # kombu's encode_body
        "content-encoding": content_encoding,
        "content-type": content_type,
        "headers": {**message.headers, **headers},
        "properties": properties,
    }
    # As celery.app.amqp's send_task_message completes it.
    event = {**message.sent_event, "queue": queue.name, "exchange": "", "routing_key": queue.name}
    # Priority 0: the queue's own list (kombu's _q_for_pri), no suffix.
    return Built(queue.name, json.dumps(envelope), event), message.body
