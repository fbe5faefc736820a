"""Working together: scoped reads (no writes)."""
