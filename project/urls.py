from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular import renderers
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from dispatcher.admin_page import fairness_data, fairness_page
from media.incoming import incoming_part
from project.health import healthz
from project.metrics import metrics_view



class SchemaView(SpectacularAPIView):
    """/api/schema/: JSON unless YAML is asked for (`?format=yaml` or the
    Accept header), so that its own errors are JSON like the rest of /api/."""

    renderer_classes = [renderers.OpenApiJsonRenderer, renderers.OpenApiJsonRenderer2,
                        renderers.OpenApiYamlRenderer, renderers.OpenApiYamlRenderer2]


urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    # FileSystemStorage's stand-in for the store's presigned part URLs (media/direct.py)
    path("store/incoming/<str:token>", incoming_part, name="media-incoming"),
    path("admin/fairness/", fairness_page, name="admin-fairness"),
    path("admin/fairness/data/", fairness_data, name="admin-fairness-data"),
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    # The API's OpenAPI 3 schema and its docs page (docs/api.md). Swagger UI
    # only: drf-spectacular's Redoc page loads fonts and a logo from CDNs.
    path("api/schema/", SchemaView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("", include("exports.urls")),
    path("", include("notify.urls")),
    path("", include("uploads.urls")),
]

# Under /api/ the answers of Django itself (no such URL, a body refused while
# parsing, a bug) keep the API's error shape; pages keep Django's.
handler400 = "uploads.api_errors.bad_request"
handler404 = "uploads.api_errors.not_found"
handler500 = "uploads.api_errors.server_error"
