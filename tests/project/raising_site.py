"""`make run`'s web application (project.asgi, under its settings) with two
more URLs whose views fail as a bug would: for tests/project/test_error_pages.py,
served by bin/web as the Procfile serves the real one."""
from __future__ import annotations

from django.conf import settings
from django.urls import path

from project.asgi import application  # noqa: F401 (what bin/web serves; sets Django up)
from project import urls

BUG = "a bug whose message names {key} and {path}"


def failing_view(request):
    raise RuntimeError(BUG.format(key=settings.SECRET_KEY[:16], path=settings.BASE_DIR))


urls.urlpatterns += [path("test-bug/", failing_view), path("api/test-bug/", failing_view)]
