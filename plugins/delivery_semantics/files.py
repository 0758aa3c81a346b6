"""What the platform's file formats share (audit files, mode files): the first error of a spec
against its JSON schema, and where it is, said for a person editing the file. Imports jsonschema
only when a file is checked."""

from __future__ import annotations


def first_error(schema: dict, spec):
    """The error jsonschema thinks best among the shallowest ones, or None."""
    import jsonschema

    errors = sorted(
        jsonschema.Draft202012Validator(schema).iter_errors(spec),
        key=lambda e: (len(list(e.absolute_path)), str(list(e.absolute_path))),
    )
    return jsonschema.exceptions.best_match(errors) if errors else None


def field_path(error) -> str:
    parts = []
    for p in error.absolute_path:
        parts.append(f"[{p}]" if isinstance(p, int) else ("." if parts else "") + str(p))
    return "".join(parts) or "(top level)"
