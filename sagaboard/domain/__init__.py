"""Services: every rule about sagas, approvals, decisions, undos and tokens, and every write."""
