"""The dispatcher is one package with one public interface and no import
circle: it reads only which lane a task is on from the Django project, and
the project (Celery app, URLs, metrics) imports it, never the reverse."""
from __future__ import annotations

import ast
from pathlib import Path

import dispatcher

PACKAGE = Path(dispatcher.__file__).parent
FIRST_PARTY = {"dispatcher", "project", "uploads", "transcoding", "notify", "exports", "bench", "tests"}
ALLOWED_FROM_PROJECT = {"project.lanes", "project.routing"}


def imported_modules(path: Path) -> set[str]:
    """Every module a file imports, at module level or inside functions."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_the_dispatcher_imports_nothing_of_the_project_but_lanes_and_routing():
    for path in PACKAGE.rglob("*.py"):
        first_party = {m for m in imported_modules(path) if m.split(".")[0] in FIRST_PARTY}
        outside = {m for m in first_party if m.split(".")[0] != "dispatcher"} - ALLOWED_FROM_PROJECT
        assert not outside, f"{path.relative_to(PACKAGE.parent)} imports {sorted(outside)}"


def test_callers_outside_the_package_use_its_public_interface_only():
    root = PACKAGE.parent
    allowed = {"dispatcher", "dispatcher.apps"}  # apps: Django loads it by name
    wiring = {"dispatcher.admin_page": {"project/urls.py"}, "dispatcher.worker": {"project/metrics.py"}}
    for path in root.glob("*/**/*.py"):
        rel = path.relative_to(root)
        if rel.parts[0] in {"dispatcher", ".venv", "tests"}:
            continue
        for module in imported_modules(path):
            if module.startswith("dispatcher.") and module not in allowed:
                assert str(rel) in wiring.get(module, set()), f"{rel} imports {module}, not the package's interface"
    assert {"enqueue", "hand_back", "cancel", "after_commit", "FairScheduler"} <= set(dispatcher.__all__)
