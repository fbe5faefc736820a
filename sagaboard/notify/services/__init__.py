"""Telling people: business rules."""
