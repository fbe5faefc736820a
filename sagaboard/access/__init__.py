"""Who may see and do what: API tokens, roles, the login guard, every read's scope."""
