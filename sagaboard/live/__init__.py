"""The live feed: websocket consumers, who may watch, and the relay from the event
log to browsers."""
