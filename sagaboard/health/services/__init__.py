"""Health and numbers: business rules."""
