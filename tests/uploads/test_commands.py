from __future__ import annotations

from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command

pytestmark = pytest.mark.django_db


def test_create_api_user_prints_the_token_last_and_reuses_the_user():
    out = StringIO()
    call_command("create_api_user", "carol", "--staff", "--password", "pw", stdout=out)
    token = out.getvalue().strip().splitlines()[-1]
    user = get_user_model().objects.get(username="carol")
    assert user.auth_token.key == token and user.is_staff and user.check_password("pw")
    again = StringIO()
    call_command("create_api_user", "carol", stdout=again)
    assert again.getvalue().strip().splitlines()[-1] == token
    assert get_user_model().objects.filter(username="carol").count() == 1
