"""The audit log and its hash chain: business rules."""
