"""Approvals: business rules."""
