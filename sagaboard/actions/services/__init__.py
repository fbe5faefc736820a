"""What people do to sagas and steps: business rules."""
