from django.urls import path

from uploads import api, delivery, direct_api, live, pages

urlpatterns = [
    path("", pages.upload_page, name="upload-page"),
    path("jobs/<uuid:job_id>/", pages.job_page, name="job-page"),
    path("batches/<uuid:batch_id>/", pages.batch_page, name="batch-page"),
    path("account/api-token/", pages.api_token_page, name="api-token"),
    path("favicon.ico", pages.favicon, name="favicon"),
    path("api/uploads/", api.UploadListCreateApi.as_view(), name="api-upload-list"),
    path("api/uploads/direct/", direct_api.DirectUploadListApi.as_view(), name="api-direct-list"),
    path("api/uploads/direct/complete/", direct_api.DirectUploadCompleteApi.as_view(), name="api-direct-complete"),
    path("api/uploads/direct/<uuid:upload_id>/", direct_api.DirectUploadDetailApi.as_view(), name="api-direct-detail"),
    path("api/uploads/direct/<uuid:upload_id>/parts/", direct_api.DirectUploadPartsApi.as_view(),
         name="api-direct-parts"),
    path("api/uploads/<uuid:upload_id>/", api.UploadDetailApi.as_view(), name="api-upload-detail"),
    path("api/jobs/", api.JobListApi.as_view(), name="api-job-list"),
    path("api/jobs/moving/", api.JobsMovingApi.as_view(), name="api-job-moving"),
    path("api/jobs/<uuid:job_id>/", api.JobDetailApi.as_view(), name="api-job-detail"),
    path("api/jobs/<uuid:job_id>/cancel/", api.JobCancelApi.as_view(), name="api-job-cancel"),
    path("api/jobs/<uuid:job_id>/retry/", api.JobRetryApi.as_view(), name="api-job-retry"),
    path("api/batches/", api.BatchListApi.as_view(), name="api-batch-list"),
    path("api/batches/<uuid:batch_id>/", api.BatchDetailApi.as_view(), name="api-batch-detail"),
    path("api/batches/<uuid:batch_id>/cancel/", api.BatchCancelApi.as_view(), name="api-batch-cancel"),
    path("api/batches/<uuid:batch_id>/retry/", api.BatchRetryApi.as_view(), name="api-batch-retry"),
    path("o/live/<str:token>/<path:path>", live.live_stream, name="live-stream"),
    path("o/<str:token>/<path:path>", delivery.output_download, name="output-download"),
]
