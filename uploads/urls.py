from django.urls import path

from uploads import api, delivery, pages, resumable

urlpatterns = [
    path("", pages.upload_page, name="upload-page"),
    path("jobs/<uuid:job_id>/", pages.job_page, name="job-page"),
    path("batches/<uuid:batch_id>/", pages.batch_page, name="batch-page"),
    path("api/uploads/", api.UploadListCreateApi.as_view(), name="api-upload-list"),
    path("api/uploads/resumable/", resumable.ResumableCreateApi.as_view(), name="api-resumable-list"),
    path("api/uploads/resumable/<uuid:guid>/", resumable.ResumableDetailApi.as_view(), name="api-resumable-detail"),
    path("api/uploads/<uuid:upload_id>/", api.UploadDetailApi.as_view(), name="api-upload-detail"),
    path("api/jobs/", api.JobListApi.as_view(), name="api-job-list"),
    path("api/jobs/<uuid:job_id>/", api.JobDetailApi.as_view(), name="api-job-detail"),
    path("api/jobs/<uuid:job_id>/cancel/", api.JobCancelApi.as_view(), name="api-job-cancel"),
    path("api/jobs/<uuid:job_id>/retry/", api.JobRetryApi.as_view(), name="api-job-retry"),
    path("api/batches/", api.BatchListApi.as_view(), name="api-batch-list"),
    path("api/batches/<uuid:batch_id>/", api.BatchDetailApi.as_view(), name="api-batch-detail"),
    path("api/batches/<uuid:batch_id>/cancel/", api.BatchCancelApi.as_view(), name="api-batch-cancel"),
    path("api/batches/<uuid:batch_id>/retry/", api.BatchRetryApi.as_view(), name="api-batch-retry"),
    path("o/<str:token>/<path:path>", delivery.output_download, name="output-download"),
]
