"""Health and numbers: scoped reads (no writes)."""
