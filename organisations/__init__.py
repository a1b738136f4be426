"""Organisations: the tenants the fair dispatcher shares lanes between.

Callers use this package's namespace (`from organisations import
lane_plans`), never its modules, as with `dispatcher`. The names resolve on
first use (PEP 562): a Django app's package is imported before its models
may be, so this file cannot import them at the top.

- `models.py`: Organisation (its plan per lane) and Membership (a user's
  one organisation).
- `selectors.py`: who is where; an organisation's plan on a lane as the
  dispatcher applies it (`lane_plans`, `member_plans`, `GroupPlan`).
- `services.py`: making organisations, an organisation of one for each
  new user, moving members.
- `admin.py`: the organisations' pages, and what the users' admin
  (uploads/admin.py) takes from here: the membership on a user's page,
  the list's organisation column and its "Move to an organisation" action.

The dependencies point one way: `uploads` (fair_policies, the API, the
admin) uses this package; it imports neither `uploads` nor `dispatcher`.
The dispatcher learns of organisations only as the `group` of a key's
policy.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "Membership": "organisations.models",
    "Organisation": "organisations.models",
    "fair_key": "organisations.models",
    "Belonging": "organisations.selectors",
    "GroupPlan": "organisations.selectors",
    "lane_plans": "organisations.selectors",
    "member_plans": "organisations.selectors",
    "organisation_names": "organisations.selectors",
    "organisations_of": "organisations.selectors",
    "plan_on": "organisations.selectors",
    "members_move": "organisations.services",
    "organisation_create": "organisations.services",
    "organisation_of_one_ensure": "organisations.services",
}

__all__ = tuple(sorted(_EXPORTS))


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'organisations' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # once
    return value
