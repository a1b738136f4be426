"""gunicorn's access log without output link tokens (project/logmask.py).

The Procfile runs gunicorn with `--logger-class project.weblog.AccessLogger`.
gunicorn formats each access line from "atoms" (request line, path, query,
referer, every request header and environ value); masking the atoms, not
the formatted line, keeps any --access-logformat correct.
"""
from __future__ import annotations

from gunicorn.glogging import Logger

from project.logmask import LINK_MARK, mask


class AccessLogger(Logger):
    def atoms(self, resp, req, environ, request_time) -> dict:
        # Most atoms hold no link: the test is a fraction of the regex's cost, on every request.
        return {name: mask(value) if isinstance(value, str) and LINK_MARK in value else value
                for name, value in super().atoms(resp, req, environ, request_time).items()}
