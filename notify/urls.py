from django.urls import path

from notify import api, pages

urlpatterns = [
    path("notifications/", pages.settings_page, name="notify-settings"),
    path("notifications/webhooks/<uuid:endpoint_id>/", pages.endpoint_page, name="notify-endpoint"),
    path("api/webhooks/", api.EndpointListCreateApi.as_view(), name="api-webhook-list"),
    path("api/webhooks/<uuid:endpoint_id>/", api.EndpointDetailApi.as_view(), name="api-webhook-detail"),
    path("api/webhooks/<uuid:endpoint_id>/deliveries/", api.EndpointDeliveriesApi.as_view(),
         name="api-webhook-deliveries"),
    path("api/webhooks/<uuid:endpoint_id>/deliveries/<uuid:delivery_id>/replay/", api.DeliveryReplayApi.as_view(),
         name="api-webhook-delivery-replay"),
    path("api/notifications/preferences/", api.PreferencesApi.as_view(), name="api-notify-preferences"),
]
