from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def home(request: HttpRequest) -> HttpResponse:
    """Placeholder landing page until the saga dashboard ships."""
    return render(request, "sagaboard/home.html")
