"""The webhooks and preferences API: thin views over services and selectors.
Errors have the project's shape ({"error": {"code", "message"}}); the
schema notes (`extend_schema`) feed /api/schema/ (docs/api.md)."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from notify import selectors, services
from notify.events import SUBSCRIBABLE
from uploads import throttling
from uploads.api_schema import errors
from notify.models import Delivery, DeliveryAttempt, Endpoint


class EndpointSerializer(serializers.ModelSerializer):
    class Meta:
        model = Endpoint
        fields = ["id", "url", "events", "is_active", "disabled_at", "disabled_reason", "created_at"]


class AttemptSerializer(serializers.ModelSerializer):
    class Meta:
        model = DeliveryAttempt
        fields = ["number", "started_at", "latency_ms", "status_code", "error", "response_prefix", "outcome",
                  "next_attempt_at"]


class DeliverySerializer(serializers.ModelSerializer):
    event = serializers.SerializerMethodField()
    attempt_log = AttemptSerializer(many=True)
    replay_of = serializers.UUIDField(source="replay_of_id", allow_null=True, read_only=True,
                                      help_text="The delivery this one replays; null for the event's first.")

    class Meta:
        model = Delivery
        fields = ["id", "event", "status", "attempts", "next_attempt_at", "last_status_code", "last_error",
                  "created_at", "delivered_at", "replay_of", "attempt_log"]

    def get_event(self, delivery: Delivery) -> dict:
        return {"id": delivery.event.webhook_id, "type": delivery.event.type}


class EndpointCreateSerializer(serializers.Serializer):
    url = serializers.CharField(max_length=2000, help_text="http(s) on an allowed port, public addresses only.")
    # Validated by the service (code `invalid_events`); typed for the schema.
    events = serializers.JSONField(help_text=f"A non-empty list of: {', '.join(SUBSCRIBABLE)}.")


class EndpointCreatedSerializer(EndpointSerializer):
    class Meta(EndpointSerializer.Meta):
        fields = [*EndpointSerializer.Meta.fields, "secret"]
        extra_kwargs = {"secret": {"help_text": "whsec_...: shown in this answer only; verify signatures with it."}}


class EndpointListCreateApi(APIView):
    @extend_schema(operation_id="webhooks_list", responses={200: inline_serializer(
        "EndpointList", {"results": EndpointSerializer(many=True)})})
    def get(self, request: Request) -> Response:
        endpoints = selectors.endpoints_for_user(user=request.user)
        return Response({"results": EndpointSerializer(endpoints, many=True).data})

    @extend_schema(operation_id="webhooks_create", request=EndpointCreateSerializer,
                   responses={201: EndpointCreatedSerializer},
                   description="Register a webhook endpoint. 400 with `invalid_events`, or a `url_*` code when "
                               "the URL is not allowed (scheme, port, credentials, a non-public address); 429 "
                               "`too_many_endpoints` past your plan's number of endpoints.")
    def post(self, request: Request) -> Response:
        params = EndpointCreateSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        endpoint = services.endpoint_create(owner=request.user, **params.validated_data)
        # The only time the secret is shown; no cache may keep it.
        body = {**EndpointSerializer(endpoint).data, "secret": endpoint.secret}
        return Response(body, status=status.HTTP_201_CREATED, headers={"Cache-Control": "no-store"})


class EndpointDetailApi(APIView):
    @extend_schema(operation_id="webhooks_retrieve", responses={200: EndpointSerializer})
    def get(self, request: Request, endpoint_id) -> Response:
        endpoint = selectors.endpoint_get_for_user(user=request.user, endpoint_id=endpoint_id)
        return Response(EndpointSerializer(endpoint).data)

    @extend_schema(operation_id="webhooks_destroy", responses={204: None},
                   description="Delete the endpoint with its deliveries.")
    def delete(self, request: Request, endpoint_id) -> Response:
        services.endpoint_delete(endpoint=selectors.endpoint_get_for_user(user=request.user, endpoint_id=endpoint_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class EndpointDeliveriesApi(ListAPIView):
    serializer_class = DeliverySerializer

    @extend_schema(operation_id="webhooks_deliveries_list",
                   description="The endpoint's deliveries, newest first, each with every attempt.")
    def get(self, request: Request, *args, **kwargs) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        endpoint = selectors.endpoint_get_for_user(user=self.request.user, endpoint_id=self.kwargs["endpoint_id"])
        return selectors.deliveries_for_endpoint(endpoint=endpoint)


class DeliveryReplayApi(APIView):
    throttle_scope = throttling.REPLAY  # a request to a receiver: a rate of its own (uploads/throttling.py)

    @extend_schema(operation_id="webhooks_deliveries_replay", request=None,
                   responses={202: DeliverySerializer, **errors(409)},
                   description="Deliver the event of an ended delivery (succeeded, failed or canceled) to the "
                               "endpoint again: a new delivery (`replay_of` this one), through the fair lane, "
                               "with the same `webhook-id`. 409 `not_replayable` while it is pending or sending, "
                               "`endpoint_disabled` when the endpoint is disabled.")
    def post(self, request: Request, endpoint_id, delivery_id) -> Response:
        endpoint = selectors.endpoint_get_for_user(user=request.user, endpoint_id=endpoint_id)
        delivery = selectors.delivery_get_for_endpoint(endpoint=endpoint, delivery_id=delivery_id)
        replay = services.delivery_replay(delivery=delivery, actor=request.user)
        return Response(DeliverySerializer(replay).data, status=status.HTTP_202_ACCEPTED)


class PreferencesSerializer(serializers.Serializer):
    email = serializers.ListField(child=serializers.CharField(), required=False)
    webhook = serializers.ListField(child=serializers.CharField(), required=False)


PREFERENCES = inline_serializer("Preferences", {
    "email": serializers.ListField(child=serializers.CharField()),
    "webhook": serializers.ListField(child=serializers.CharField())})


class PreferencesApi(APIView):
    """GET: events per channel; PUT/PATCH {"email": [...], "webhook": [...]}."""

    @extend_schema(operation_id="notification_preferences_retrieve", responses={200: PREFERENCES},
                   description="The events you receive per channel (your choice, else the defaults).")
    def get(self, request: Request) -> Response:
        return Response(selectors.preferences_for_user(user_id=request.user.pk))

    @extend_schema(operation_id="notification_preferences_update", request=PreferencesSerializer,
                   responses={200: PREFERENCES, **errors(400)},
                   description="Set the events per channel; a channel left out keeps its events. 400 "
                               "`invalid_events` for an unknown event.")
    def put(self, request: Request) -> Response:
        params = PreferencesSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        for channel, events in params.validated_data.items():
            services.preferences_set(user=request.user, channel=channel, events=events)
        return Response(selectors.preferences_for_user(user_id=request.user.pk))

    @extend_schema(operation_id="notification_preferences_partial_update", request=PreferencesSerializer,
                   responses={200: PREFERENCES, **errors(400)})
    def patch(self, request: Request) -> Response:
        return self.put(request)
