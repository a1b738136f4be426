from django.urls import path

from exports import api

urlpatterns = [
    path("api/exports/", api.ExportCreateApi.as_view(), name="api-export-create"),
]
