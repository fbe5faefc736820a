"""Telling people: the notification outbox (e-mail, Slack, webhooks) and decision-link tokens."""
