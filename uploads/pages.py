"""HTML pages: the upload page. It talks to the JSON API from the browser."""
from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.csrf import ensure_csrf_cookie


@login_required
@ensure_csrf_cookie
def upload_page(request: HttpRequest) -> HttpResponse:
    return render(request, "uploads/upload_page.html")
