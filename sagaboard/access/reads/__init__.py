"""Who may see and do what: scoped reads (no writes)."""
