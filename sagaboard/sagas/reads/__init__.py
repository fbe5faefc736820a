"""What operators read: scoped reads (no writes)."""
