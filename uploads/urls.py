from django.urls import path

from uploads import api, delivery, pages

urlpatterns = [
    path("", pages.upload_page, name="upload-page"),
    path("jobs/<uuid:job_id>/", pages.job_page, name="job-page"),
    path("api/uploads/", api.UploadCreateApi.as_view(), name="api-upload-create"),
    path("api/jobs/", api.JobListApi.as_view(), name="api-job-list"),
    path("api/jobs/<uuid:job_id>/", api.JobDetailApi.as_view(), name="api-job-detail"),
    path("o/<str:token>/<path:path>", delivery.output_download, name="output-download"),
]
