"""Fairlane settings, one module per integration (as cookiecutter-django
splits its own): Django core, storage, limits and plans, the API, Celery
and the fair dispatcher's lanes, media processing and reliability,
operations, notifications. Every value that differs between machines comes
from the environment, read in environ.py and nowhere else.

`FAIRLANE_ENV=production` turns on the deploy checks' requirements (secret
key from the environment, HTTPS-only cookies, HSTS) and refuses to start
without them. Order matters only where a module reads another's value, and
each imports what it reads by name.
"""
from project.settings.environ import BASE_DIR, PRODUCTION, VAR_DIR  # noqa: F401
from project.settings.core import *  # noqa: F401,F403
from project.settings.database import *  # noqa: F401,F403
from project.settings.storage import *  # noqa: F401,F403
from project.settings.limits import *  # noqa: F401,F403
from project.settings.api import *  # noqa: F401,F403
from project.settings.celery_lanes import *  # noqa: F401,F403
from project.settings.processing import *  # noqa: F401,F403
from project.settings.operations import *  # noqa: F401,F403
from project.settings.notifications import *  # noqa: F401,F403
