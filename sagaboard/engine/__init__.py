"""sagaboard's side of undo_core's engine: the Django stores, the undo route, rollback outcomes."""
