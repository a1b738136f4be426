"""The tests' password hasher (tests/conftest.py, `_quick_password_hashes`)."""
from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class QuickPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    """pbkdf2_sha256 with 1,000 iterations: any PBKDF2PasswordHasher
    verifies its hashes (it reads the count from the hash)."""

    iterations = 1_000
