"""Audits of a team's own pipeline: the audit files, and the stores their outbox and sink rows are read from."""
