"""Working together: notes, owners, saved views, the inbox."""
