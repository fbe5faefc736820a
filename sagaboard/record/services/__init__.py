"""Recording what agents report: business rules."""
