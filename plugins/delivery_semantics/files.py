"""What the platform's file formats share (audit files, mode files): reading one, and the first
error of its spec against its JSON schema, and where it is, said for a person editing the file.
Imports yaml and jsonschema only when a file is read."""

from __future__ import annotations

from pathlib import Path


def read_yaml(path: Path, error: type[Exception]):
    """The file's spec; `error` naming the file and what is wrong with it otherwise."""
    import yaml

    try:
        return yaml.safe_load(path.read_text())
    except OSError as e:
        raise error(f"{path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise error(f"{path}: not valid YAML{at}: {getattr(e, 'problem', None) or e}") from None


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
