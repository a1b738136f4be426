"""The tests' quick password hashes are ordinary pbkdf2_sha256 hashes:
the product's own hasher verifies them (the servers the tests start use
it), and the product still hashes with Django's full count."""
from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher, check_password, make_password


def test_a_quick_hash_is_verified_by_the_products_own_hasher():
    encoded = make_password("secret")
    algorithm, iterations, _, _ = encoded.split("$")
    assert (algorithm, iterations) == ("pbkdf2_sha256", "1000")
    assert PBKDF2PasswordHasher().verify("secret", encoded)
    assert not PBKDF2PasswordHasher().verify("wrong", encoded)
    assert check_password("secret", encoded)
    assert PBKDF2PasswordHasher.iterations >= 1_000_000  # what the product uses is Django's
