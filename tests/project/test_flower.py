"""Flower is never open in production."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_flower_refuses_to_start_in_production_without_basic_auth():
    env = {k: v for k, v in os.environ.items() if k != "FLOWER_BASIC_AUTH"}
    env["FAIRLANE_ENV"] = "production"
    result = subprocess.run([str(ROOT / "bin" / "flower")], env=env, capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert "FLOWER_BASIC_AUTH" in result.stderr
