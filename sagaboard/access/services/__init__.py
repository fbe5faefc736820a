"""Who may see and do what: business rules."""
