"""Reads, scoped to what the caller may see; no writes and no business decisions."""
