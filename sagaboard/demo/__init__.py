"""The demo: its flows and the server-side undos they use (loaded only by the demo
command, and in settings only with DEBUG)."""
