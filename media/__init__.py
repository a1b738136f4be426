"""The storage seam: the one place that knows where uploads and outputs live.

Everything else names objects by key (`uploads/<user>/<random>`,
`outputs/<job>/<attempt>/...`, `exports/<job>/<token>/...`) and calls the
functions below; none of it builds a path under MEDIA_ROOT or talks to
boto3. Behind them is Django's `STORAGES["default"]`: FileSystemStorage (one
host, `make run`'s default) or django-storages' S3Storage (many hosts
sharing an S3-compatible store; settings `FAIRLANE_STORAGE=s3` and
`FAIRLANE_S3_*`). Workers copy inputs into a private scratch folder
(`scratch`), never reading the store from ffmpeg, and upload what they made
under their attempt's own prefix; the database transition publishes.

See docs/storage.md for the design and the settings.
"""
from media.input_cache import Growing, Stopped, fetch_input, input_note, stream_input
from media.input_cache import keep as keep_input
from media.keys import export_key, exports_prefix, job_prefix, outputs_prefix, upload_key
from media.multipart import Part, UploadGone, multipart_abort, multipart_begin, multipart_complete, multipart_put
from media.scratch import attempt_scratch, scratch_sweep
from media.store import (
    StorageUnavailable,
    content_type_for,
    delete,
    delete_prefix,
    exists,
    fetch,
    fetch_many,
    list_prefix,
    open_file,
    open_stream,
    presigned_url,
    put_file,
    put_many,
    put_tree,
    read_bytes,
    read_range,
    reset_clients,
    save_upload,
    size,
    uses_object_storage,
)

__all__ = [
    "Growing", "Part", "Stopped", "StorageUnavailable", "UploadGone", "attempt_scratch", "content_type_for", "delete",
    "delete_prefix", "exists", "export_key", "exports_prefix", "fetch", "fetch_input", "fetch_many", "input_note",
    "job_prefix", "keep_input", "list_prefix", "multipart_abort", "multipart_begin", "multipart_complete",
    "multipart_put", "open_file", "open_stream", "outputs_prefix", "presigned_url", "put_file", "put_many",
    "put_tree", "read_bytes", "read_range", "reset_clients", "save_upload", "scratch_sweep", "size", "stream_input",
    "upload_key", "uses_object_storage",
]
