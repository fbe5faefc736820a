from django.urls import path

from sagaboard.live.consumers import SagaFeedConsumer

websocket_urlpatterns = [path("ws/sagas/", SagaFeedConsumer.as_asgi())]
