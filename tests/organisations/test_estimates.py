"""A batch's finish estimate assumes the share the two-level dispatcher
gives: the organisation's share of the lane, then the user's of the
organisation's, as the dispatcher says it (share_basis), not the user's
weight over every user's."""
from __future__ import annotations

import pytest

import dispatcher
from organisations import members_move, organisation_create
from project.lanes import Lane
from tests.organisations.test_fair_policies import _queued_job
from uploads import services
from uploads.estimates import lane_share_basis

pytestmark = pytest.mark.django_db


def test_a_members_estimate_assumes_its_share_of_its_organisations_share(make_user, cpu_lane_paused):
    alice, bob, carol, dave = (make_user(n) for n in ("alice", "bob", "carol", "dave"))
    northwind = organisation_create(name="Northwind", transcode_cap=2)
    members_move(user_ids=[alice.pk, bob.pk], organisation=northwind)
    jobs = [_queued_job(owner) for owner in (alice, bob, carol) for _ in range(4)]
    services.jobs_enqueue(job_ids=[j.id for j in jobs])
    # Northwind and carol's organisation of one share the lane 1:1; alice and bob share Northwind's half.
    alice_basis = lane_share_basis(user_id=alice.pk)
    assert alice_basis.share == pytest.approx(1 / 4)
    assert alice_basis.cap == 2  # the organisation's cap bounds all its members together
    assert lane_share_basis(user_id=carol.pk).share == pytest.approx(1 / 2)
    # dave has nothing queued: his first job would make his organisation a third one.
    assert lane_share_basis(user_id=dave.pk).share == pytest.approx(1 / 3)
    dispatcher.scheduler(Lane.CPU_TRANSCODE).clear()
