import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
application = get_wsgi_application()

# Each web worker builds its S3 clients as it boots (media/store.py).
from media.store import warm_clients  # noqa: E402  (after Django is set up)

warm_clients()
