"""Approvals: policies and their conditions, votes, decisions by page, link or Slack."""
