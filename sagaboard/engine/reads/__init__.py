"""sagaboard's side of undo_core's engine: scoped reads (no writes)."""
