from django.contrib import admin
from django.urls import path

from sagaboard import views
from sagaboard.api import api

urlpatterns = [
    path("", views.home, name="home"),
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
]
