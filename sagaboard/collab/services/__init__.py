"""Working together: business rules."""
