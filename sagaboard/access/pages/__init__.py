"""Who may see and do what: thin views."""
