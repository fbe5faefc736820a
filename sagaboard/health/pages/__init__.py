"""Health and numbers: thin views."""
