"""Batch jobs: business rules."""
