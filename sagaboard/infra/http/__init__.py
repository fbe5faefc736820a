"""Request plumbing: body limits and parsing, rate counting, the API path, forwarded addresses."""
