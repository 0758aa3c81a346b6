"""Audits of a team's own pipeline: the audit files, and the stores their outbox and sink rows are read from."""

from delivery_semantics.catalog import CatalogError


class AuditError(CatalogError):
    """An audit that cannot be run: the message names the file and the field."""
