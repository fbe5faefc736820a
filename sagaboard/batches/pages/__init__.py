"""Batch jobs: thin views."""
