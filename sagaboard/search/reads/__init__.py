"""The saga list's search language: scoped reads (no writes)."""
