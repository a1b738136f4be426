"""Writes of organisations and memberships.

Every user belongs to exactly one organisation: a new user gets an
organisation of one (`organisation_of_one_ensure`, from the user's
post_save), and moving people (`members_move`) changes which one, never
leaves them without. The dispatcher learns of a move with the user's next
submit: the whole policy, the organisation included, goes with every
submit (dispatcher.enqueue), and the jobs already held stay where they
were charged.
"""
from __future__ import annotations

import logging
from collections.abc import Iterable

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from organisations.models import Membership, Organisation

log = logging.getLogger(__name__)


def organisation_create(*, name: str, **plan) -> Organisation:
    """A new organisation with `plan` (Organisation.PLAN_FIELDS), validated
    by the same bounds as the admin's form."""
    organisation = Organisation(name=name, **plan)
    organisation.full_clean()
    organisation.save()
    return organisation


def organisation_of_one_ensure(*, user: AbstractBaseUser) -> Membership:
    """The user's membership, made with an organisation of one (named after
    the user, default plan) when the user has none. Idempotent: a second
    call, or a race with another, finds the first's (the membership's unique
    user decides)."""
    existing = Membership.objects.filter(user=user).first()
    if existing is not None:
        return existing
    with transaction.atomic():
        organisation = Organisation.objects.create(name=user.get_username())
        membership, created = Membership.objects.get_or_create(user=user, defaults={"organisation": organisation})
        if not created:  # another process made it between our read and write
            organisation.delete()
    return membership


def user_created(sender, instance: AbstractBaseUser, created: bool, raw: bool = False, **kwargs) -> None:
    """post_save of the user model: a new user (not one loaded from a
    fixture, which brings its own rows) gets an organisation of one."""
    if created and not raw:
        organisation_of_one_ensure(user=instance)


def members_move(*, user_ids: Iterable[int], organisation: Organisation, actor: AbstractBaseUser | None = None
                 ) -> int:
    """Make these users members of `organisation` (leaving whichever they
    were in); returns how many moved. Their organisations of one, now
    empty, stay (an organisation is deleted by staff, and only once empty:
    Membership's PROTECT)."""
    ids = sorted(set(user_ids))
    with transaction.atomic():
        moved = Membership.objects.filter(user_id__in=ids).exclude(organisation=organisation).update(
            organisation=organisation, joined_at=timezone.now())
        have = set(Membership.objects.filter(user_id__in=ids).values_list("user_id", flat=True))
        Membership.objects.bulk_create([Membership(user_id=i, organisation=organisation) for i in ids
                                        if i not in have])
    moved += len(ids) - len(have)
    log.info("%s moved %d user(s) to organisation %s (%s): %s", actor or "system", moved, organisation.pk,
             organisation.name, ids[:20])
    return moved
