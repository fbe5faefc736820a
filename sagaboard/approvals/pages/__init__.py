"""Approvals: thin views."""
