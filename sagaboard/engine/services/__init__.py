"""sagaboard's side of undo_core's engine: business rules."""
