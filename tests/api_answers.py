"""What every API answer to bad input must be, for the tests that throw
inputs at routes (tests/project/test_bad_input.py walks the URL
configuration; the fuzz tests of direct-upload bodies and list cursors generate
values): never a 5xx, and an error in the API's one shape,
{"error": {"code", "message", ...}} (uploads/api_errors.py)."""
from __future__ import annotations


def assert_no_5xx_and_error_shape(resp, where: str) -> None:
    assert resp.status_code < 500, f"{where} answered {resp.status_code}"
    if resp.status_code >= 400 and resp.request["REQUEST_METHOD"] != "HEAD":  # HEAD: headers only
        assert "json" in resp.get("Content-Type", ""), f"{where}: {resp.get('Content-Type')}"
        error = resp.json()["error"]
        assert isinstance(error["code"], str) and error["code"], f"{where}: {error}"
        assert isinstance(error["message"], str) and error["message"], f"{where}: {error}"
