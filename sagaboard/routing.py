from django.urls import path

from sagaboard.consumers import SagaFeedConsumer

websocket_urlpatterns = [path("ws/sagas/", SagaFeedConsumer.as_asgi())]
