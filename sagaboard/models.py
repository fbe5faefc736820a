"""Database models for sagaboard.

Empty for now. Saga, SagaStep, Approval and AuditEvent arrive with the dashboard.
"""
