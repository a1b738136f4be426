"""Media errors are permanent: the same file fails the same way every time, so
they fail the job at once with a code the user can act on, never retry."""
from __future__ import annotations

import errno

from uploads.errors import JobError


class MediaError(JobError):
    """Bad media: the job fails at once with this code and message."""


def reason(exc: BaseException) -> str:
    """What went wrong, in the decoder's words, without the file name it
    appends: PyAV's and the OS's errors carry the path they were opening
    ("[Errno 1094995529] Invalid data found when processing input: '/srv/…'"),
    and a user is told about their file, not where the server keeps it."""
    strerror = getattr(exc, "strerror", None)  # OSError and av.error.FFmpegError
    if strerror:
        return strerror[:1].upper() + strerror[1:]
    return str(exc) or type(exc).__name__


def decoder_failure(code: str, message: str, exc: BaseException, *, needs_bytes: int = 0) -> Exception:
    """What a decoder's error means for the job: MemoryError when it ran out
    of memory (in a decoding child: the budget of transcoding/sandbox.py, so
    `resource_limit`), else MediaError(code, message). Decoders report that
    in their own ways: libav as ENOMEM, or EAGAIN when a decoding thread
    cannot get its stack; Pillow as an OSError "out of memory when reading
    image file"; and some not at all (libavcodec's H.264 decoder with one
    thread reports invalid data). So a caller that knows what the decode
    needs at the least (`needs_bytes`: a few frames of the declared size)
    has it checked: when this process cannot even allocate that much, the
    failure is the budget's, not the file's."""
    if getattr(exc, "errno", None) in (errno.ENOMEM, errno.EAGAIN) or "out of memory" in str(exc):
        return MemoryError(str(exc))
    if needs_bytes and not _can_allocate(needs_bytes):
        return MemoryError(f"{needs_bytes} bytes do not fit: {exc}")
    return MediaError(code, message)


def _can_allocate(size: int) -> bool:
    try:
        block = bytearray(size)
    except MemoryError:
        return False
    del block
    return True
