"""The webhooks and preferences API: thin views over services and selectors.
Errors have the project's shape ({"error": {"code", "message"}})."""
from __future__ import annotations

from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from notify import selectors, services
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

    class Meta:
        model = Delivery
        fields = ["id", "event", "status", "attempts", "next_attempt_at", "last_status_code", "last_error",
                  "created_at", "delivered_at", "attempt_log"]

    def get_event(self, delivery: Delivery) -> dict:
        return {"id": delivery.event.webhook_id, "type": delivery.event.type}


class EndpointCreateSerializer(serializers.Serializer):
    url = serializers.CharField(max_length=2000)
    events = serializers.JSONField()


class EndpointListCreateApi(APIView):
    def get(self, request: Request) -> Response:
        endpoints = selectors.endpoints_for_user(user=request.user)
        return Response({"results": EndpointSerializer(endpoints, many=True).data})

    def post(self, request: Request) -> Response:
        params = EndpointCreateSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        endpoint = services.endpoint_create(owner=request.user, **params.validated_data)
        # The only time the secret is shown; no cache may keep it.
        body = {**EndpointSerializer(endpoint).data, "secret": endpoint.secret}
        return Response(body, status=status.HTTP_201_CREATED, headers={"Cache-Control": "no-store"})


class EndpointDetailApi(APIView):
    def get(self, request: Request, endpoint_id) -> Response:
        endpoint = selectors.endpoint_get_for_user(user=request.user, endpoint_id=endpoint_id)
        return Response(EndpointSerializer(endpoint).data)

    def delete(self, request: Request, endpoint_id) -> Response:
        services.endpoint_delete(endpoint=selectors.endpoint_get_for_user(user=request.user, endpoint_id=endpoint_id))
        return Response(status=status.HTTP_204_NO_CONTENT)


class EndpointDeliveriesApi(ListAPIView):
    serializer_class = DeliverySerializer

    def get_queryset(self):
        endpoint = selectors.endpoint_get_for_user(user=self.request.user, endpoint_id=self.kwargs["endpoint_id"])
        return selectors.deliveries_for_endpoint(endpoint=endpoint)


class PreferencesSerializer(serializers.Serializer):
    email = serializers.ListField(child=serializers.CharField(), required=False)
    webhook = serializers.ListField(child=serializers.CharField(), required=False)


class PreferencesApi(APIView):
    """GET: events per channel; PUT/PATCH {"email": [...], "webhook": [...]}."""

    def get(self, request: Request) -> Response:
        return Response(selectors.preferences_for_user(user_id=request.user.pk))

    def put(self, request: Request) -> Response:
        params = PreferencesSerializer(data=request.data)
        params.is_valid(raise_exception=True)
        for channel, events in params.validated_data.items():
            services.preferences_set(user=request.user, channel=channel, events=events)
        return Response(selectors.preferences_for_user(user_id=request.user.pk))

    patch = put
