"""sagaboard's and undo_core's tests; helpers shared by them are in ``tests.support``."""
