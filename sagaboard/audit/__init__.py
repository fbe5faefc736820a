"""The audit log and its hash chain: who did what, when and why, tamper-evident."""
