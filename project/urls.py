from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from dispatcher.admin_page import fairness_page
from project.health import healthz
from project.metrics import metrics_view

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("metrics", metrics_view, name="metrics"),
    path("admin/fairness/", fairness_page, name="admin-fairness"),
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("exports.urls")),
    path("", include("notify.urls")),
    path("", include("uploads.urls")),
]
