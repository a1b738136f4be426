"""What the web server runs (the Procfile: granian, ASGI): Django's WSGI
app (project/wsgi.py) in a pool of FAIRLANE_WEB_THREADS threads (a2wsgi),
behind the front door that keeps clients' turns fair and holds refused
requests without a thread (project/web_gate.py)."""
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")

from a2wsgi import WSGIMiddleware  # noqa: E402
from django.conf import settings  # noqa: E402

from project.wsgi import application as django_application  # noqa: E402  (sets Django up)
from project.web_gate import WebGate  # noqa: E402
from uploads.throttling import known_refusal, known_users  # noqa: E402

application = WebGate(
    WSGIMiddleware(django_application, workers=settings.FAIRLANE_WEB_THREADS),
    slots=settings.FAIRLANE_WEB_THREADS, slots_per_client=settings.FAIRLANE_WEB_THREADS_PER_CLIENT,
    refused=known_refusal, user_of=known_users.user_of, session_cookie=settings.SESSION_COOKIE_NAME,
    hold_s=settings.FAIRLANE_WEB_REFUSAL_HOLD_S, held_per_client=settings.FAIRLANE_WEB_HELD_PER_CLIENT,
    held_most=settings.FAIRLANE_WEB_HELD_MOST, waiting_per_client=settings.FAIRLANE_WEB_WAITING_PER_CLIENT)

# Start-up's objects out of the collector's full passes (project/gc_pauses.py),
# short GIL turns for the threads of every user's requests (project/gil_turns.py),
# and short CPU slices for all of this process's threads (project/cpu_slices.py).
from project.cpu_slices import short_slices_here  # noqa: E402
from project.gc_pauses import freeze_startup_objects  # noqa: E402
from project.gil_turns import shorten_gil_turns  # noqa: E402

freeze_startup_objects()
shorten_gil_turns()
short_slices_here()
