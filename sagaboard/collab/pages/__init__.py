"""Working together: thin views."""
