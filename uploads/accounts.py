"""A person's own account: the API token. DRF's authtoken keeps one token
per user; the page shows it only in the answer that made it (created or
rotated, with Cache-Control: no-store), like a webhook's signing secret:
afterwards the page says that there is one and since when, never what it
is, so a token left on a screen or in a browser's history is not one that
still works after a rotation."""
from __future__ import annotations

import logging

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from rest_framework.authtoken.models import Token

log = logging.getLogger(__name__)


def api_token_rotate(*, user: AbstractBaseUser) -> Token:
    """A new token for `user`; the old one stops working at once (its row
    goes in the same transaction, so there is never a moment with two)."""
    with transaction.atomic():
        Token.objects.filter(user=user).delete()
        token = Token.objects.create(user=user)
    log.info("user %s rotated their API token", user.pk)
    return token
