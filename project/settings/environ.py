"""The one place that reads the environment: every value that differs
between machines is an environment variable, read through these helpers
by the modules beside this one and nowhere else (docs/configuration.md)."""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path


BASE_DIR = Path(__file__).resolve().parent.parent.parent


def env(name: str, default: str | None = None) -> str | None:
    """The variable's value, or `default` when it is unset."""
    return os.environ.get(name, default)


def environ() -> Mapping[str, str]:
    """The whole environment, for what reads many variables by prefix
    (storage.s3_storages). Lower case: never a setting itself, so the
    environment's secrets are not in django.conf.settings."""
    return os.environ


def env_bool(name: str, default: bool) -> bool:
    return os.environ.get(name, str(default)).strip().lower() in {"1", "true", "yes", "on"}


def env_list(name: str, default: str) -> list[str]:
    return [item.strip() for item in os.environ.get(name, default).split(",") if item.strip()]


VAR_DIR = Path(os.environ.get("FAIRLANE_VAR_DIR") or BASE_DIR / "var")  # empty is unset: never the cwd
PRODUCTION = os.environ.get("FAIRLANE_ENV", "development") == "production"
