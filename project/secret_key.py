"""The secret key of a single-machine install, made once under var/.

Without DJANGO_SECRET_KEY, every install used to sign with the same key
from the repository, so anyone could forge its signed output links and
sessions. Instead each install makes a random key the first time a process
needs one and keeps it in var/secret_key (mode 0600); every process of the
install (web, workers, beat, the tests' workers, which share FAIRLANE_VAR_DIR)
reads the same file.

Several hosts must share one key, and a key must outlive var/: set
DJANGO_SECRET_KEY, which production (FAIRLANE_ENV=production) requires.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

# Django's checks want at least 50 characters with 5 distinct ones; 50
# random bytes in URL-safe base64 are 67.
KEY_BYTES = 50


def _read(path: Path) -> str:
    key = path.read_text().strip()
    if len(key) < 50:
        raise ImproperlyConfigured(f"{path} holds no usable secret key: delete it (a new one is made) or set "
                                   "DJANGO_SECRET_KEY")
    return key


def install_secret_key(path: Path) -> str:
    """The key kept in `path`, made first if there is none.

    Processes that start together (honcho starts five at once) race to make
    it: each writes its own candidate to a private file and hard-links it to
    `path`, which succeeds for exactly one of them (link refuses an existing
    name); everyone then reads what is there, a whole file.
    """
    try:
        return _read(path)
    except FileNotFoundError:
        pass
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        candidate = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(KEY_BYTES) + "\n")
            out.flush()
            os.fsync(out.fileno())
        try:
            os.link(candidate, path)
        except FileExistsError:
            pass  # another process made it first: theirs is the key
        finally:
            os.unlink(candidate)
    except OSError as exc:
        raise ImproperlyConfigured(f"cannot keep a secret key in {path} ({exc}); set DJANGO_SECRET_KEY") from exc
    return _read(path)
