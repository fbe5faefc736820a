"""What people do to sagas and steps: thin views."""
