"""The dispatcher is given each user's organisation as their group: the
lane shares its worker time between organisations by their plan's weight
on it (capped and rate-limited as a whole), then each organisation's
between its members by their own plan's weight (each still with their own
cap and rate). The group comes from the membership in the database, never
from the client."""
from __future__ import annotations

import uuid

import pytest

import dispatcher
from organisations import Membership, members_move, organisation_create
from project.lanes import Lane
from uploads import services
from uploads.models import Job, Profile, Upload
from uploads.services import fair_policies

pytestmark = pytest.mark.django_db


@pytest.fixture
def studio(make_user):
    """Northwind: alice (weight 2, her own cap 3) and bob; carol alone."""
    alice, bob, carol = make_user("alice"), make_user("bob"), make_user("carol")
    Profile.objects.create(user=alice, weight=2.0, transcode_cap=3, notify_rate_per_s=1.0, notify_burst=2)
    org = organisation_create(name="Northwind", transcode_weight=3.0, transcode_cap=8, transcode_rate_per_s=5.0,
                              transcode_burst=20, notify_weight=0.5, notify_cap=4, notify_rate_per_s=2.0)
    members_move(user_ids=[alice.pk, bob.pk], organisation=org)
    return org, alice, bob, carol


def test_each_user_gets_their_organisation_as_the_group_with_its_plan_on_the_lane(studio, settings):
    settings.NOTIFY_USER_CAP = 16
    org, alice, bob, carol = studio
    cpu = fair_policies(user_ids=[alice.pk, bob.pk, carol.pk], lane=Lane.CPU_TRANSCODE)
    io = fair_policies(user_ids=[alice.pk, bob.pk, carol.pk], lane=Lane.IO_NOTIFY)
    group = f"org:{org.pk}"
    assert cpu[alice.pk] == dispatcher.KeyPolicy(weight=2.0, cap=3, group=group, group_weight=3.0, group_cap=8,
                                                 group_rate=(5.0, 20.0))
    assert cpu[bob.pk] == dispatcher.KeyPolicy(group=group, group_weight=3.0, group_cap=8, group_rate=(5.0, 20.0))
    assert io[alice.pk] == dispatcher.KeyPolicy(weight=2.0, cap=16, rate=(1.0, 2.0), group=group, group_weight=0.5,
                                                group_cap=4, group_rate=(2.0, 10.0))
    # Alone in her organisation of one, carol's group has the defaults (the migration copied existing plans).
    own = f"org:{carol.membership.organisation_id}"
    assert cpu[carol.pk] == dispatcher.KeyPolicy(group=own)
    assert io[carol.pk] == dispatcher.KeyPolicy(cap=16, group=own, group_cap=16)


def test_a_user_without_a_membership_is_a_group_of_their_own(make_user):
    alice = make_user("alice")
    Membership.objects.filter(user=alice).delete()
    assert fair_policies(user_ids=[alice.pk], lane=Lane.CPU_TRANSCODE)[alice.pk].group is None


def test_the_policies_of_many_users_cost_one_query_and_one_more_for_users_in_no_organisation(
        studio, make_user, django_assert_num_queries):
    ids = [u.pk for u in studio[1:]] + [make_user(f"u{i}").pk for i in range(20)]
    with django_assert_num_queries(1):  # the users' memberships with their plans and their organisations' plans
        policies = fair_policies(user_ids=ids, lane=Lane.CPU_TRANSCODE)
    assert len(policies) == len(ids) and all(p.group for p in policies.values())
    loner = make_user("loner")
    Membership.objects.filter(user=loner).delete()
    Profile.objects.create(user=loner, weight=3.0)
    with django_assert_num_queries(2):  # and the plans of those in none
        alone = fair_policies(user_ids=[*ids, loner.pk], lane=Lane.CPU_TRANSCODE)[loner.pk]
    assert (alone.group, alone.weight) == (None, 3.0)


def _queued_job(owner) -> Job:
    upload = Upload.objects.create(owner=owner, batch=uuid.uuid4(), filename="a.mp4", file="x", size=1)
    return Job.objects.create(upload=upload, owner=owner, lane="cpu-transcode", status=Job.Status.QUEUED)


def test_the_dispatcher_shares_by_organisation_then_member(studio, cpu_lane_paused):
    """Through the real dispatcher (Redis, the Lua): what alice's and
    carol's next job would get. Northwind (3) and carol's organisation (1)
    are busy: Northwind has 3/4 of the lane, and alice (2) and bob (1)
    share it 2:1; carol has 1/4."""
    org, alice, bob, carol = studio
    sched = dispatcher.scheduler(Lane.CPU_TRANSCODE)
    jobs = [_queued_job(owner) for owner in (alice, alice, bob, carol) for _ in range(3)]
    services.jobs_enqueue(job_ids=[j.id for j in jobs])
    alice_basis = sched.share_basis(str(alice.pk))
    assert (alice_basis["group"], alice_basis["group_weight"], alice_basis["group_cap"]) == (f"org:{org.pk}", 3.0, 8)
    assert alice_basis["share"] == pytest.approx(3 / 4 * 2 / 3)
    assert sched.share_basis(str(bob.pk))["share"] == pytest.approx(3 / 4 * 1 / 3)
    assert sched.share_basis(str(carol.pk))["share"] == pytest.approx(1 / 4)
    assert set(sched.snapshot()["groups"]) >= {f"org:{org.pk}", f"org:{carol.membership.organisation_id}"}
    sched.clear()
