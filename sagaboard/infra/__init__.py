"""Plumbing under everything: request bodies and limits, rate counting, logs, clocks,
SQLite and the embedded broker."""
