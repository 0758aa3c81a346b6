"""What the platform's file formats share (audit files, mode files): reading one, and the first
error of its spec against its JSON schema, and where it is, said for a person editing the file.
Imports yaml and jsonschema only when a file is read."""

from __future__ import annotations

from pathlib import Path

# A platform file is a page of settings. Bounds on its size and on YAML's aliases keep a hostile one
# (an alias bomb: nine aliases a level make 9^7 nodes of a 1 KB file) from filling memory, or an
# error message, when a DAG file reads the folder.
MAX_FILE_BYTES = 1 << 20
MAX_ALIASES = 100
MAX_NODES = 100_000
MESSAGE_CHARS = 300


def control(c: str) -> bool:
    """A control character: one that can end, split or rewrite a line."""
    return ord(c) < 32 or ord(c) == 127


def one_line(text: str, limit: int = MESSAGE_CHARS) -> str:
    """A message as one line of at most `limit` characters: control characters become spaces."""
    flat = "".join(" " if control(c) else c for c in str(text))
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def _loader():
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        aliases = 0

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                self.aliases += 1
                if self.aliases > MAX_ALIASES:
                    raise yaml.YAMLError(f"more than {MAX_ALIASES} aliases (*name)")
            return super().compose_node(parent, index)

    return BoundedLoader


def _nodes(spec, budget: int) -> int:
    """Nodes of the spec as expanded (a shared alias counts each time), counted up to `budget`."""
    stack, seen = [spec], 0
    while stack and seen <= budget:
        node = stack.pop()
        seen += 1
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return seen


def read_yaml(path: Path, error: type[Exception]):
    """The file's spec; `error` naming the file and what is wrong with it (one line) otherwise."""
    import yaml

    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise error(f"{path}: {e.strerror}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise error(f"{path}: larger than {MAX_FILE_BYTES >> 10} KiB: a platform file is a page of settings")
    try:
        spec = yaml.load(raw.decode("utf-8"), Loader=_loader())  # noqa: S506 (a SafeLoader with alias and size bounds)
    except UnicodeDecodeError:
        raise error(f"{path}: not UTF-8 text") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise error(one_line(f"{path}: not valid YAML{at}: {getattr(e, 'problem', None) or e}")) from None
    except RecursionError:
        raise error(f"{path}: nested too deeply") from None
    except (ValueError, TypeError, OverflowError) as e:  # a tagged or typed scalar YAML cannot build
        raise error(one_line(f"{path}: not valid YAML: {type(e).__name__}: {e}")) from None
    if _nodes(spec, MAX_NODES) > MAX_NODES:
        raise error(f"{path}: more than {MAX_NODES} values once its aliases are expanded")
    return spec


def total(path: Path, error: type[Exception], read):
    """`read(path)`'s result, or `error` naming the file: whatever goes wrong while one file is read
    or checked is that file's error, one line, so it never stops the others (a DAG file reads the
    whole folder) nor prints a traceback."""
    try:
        return read(path)
    except error:
        raise
    except RecursionError:
        raise error(f"{path}: nested too deeply") from None
    except Exception as e:
        raise error(one_line(f"{path}: cannot be read: {type(e).__name__}: {e}")) from None


def discover(directory: Path, error: type[Exception], load) -> list:
    """Every *.yaml of a folder, each `load`ed or its error (`total`): one bad file does not hide
    the others."""
    found = []
    for p in sorted(directory.glob("*.yaml")):
        try:
            found.append((p.stem, total(p, error, load)))
        except error as e:
            found.append((p.stem, e))
    return found


def _whole_pattern(validator, pattern, instance, schema):
    """JSON Schema's `pattern` as the platform means it: the whole string. Python's `$` also matches
    before a final newline, so a name with a control character in it is refused outright."""
    import re

    from jsonschema.exceptions import ValidationError

    if not validator.is_type(instance, "string"):
        return
    if re.search(pattern, instance) is None or any(map(control, instance)):
        yield ValidationError(f"{one_line(repr(instance), 80)} does not match {pattern!r}")


def validator_class():
    """Draft 2020-12 with whole-string patterns: what every platform file is validated with."""
    import jsonschema

    return jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": _whole_pattern})


def first_error(schema: dict, spec):
    """The error jsonschema thinks best among the shallowest ones, or None."""
    import jsonschema

    errors = sorted(
        validator_class()(schema).iter_errors(spec),
        key=lambda e: (len(list(e.absolute_path)), str(list(e.absolute_path))),
    )
    return jsonschema.exceptions.best_match(errors) if errors else None


def field_path(error) -> str:
    parts = []
    for p in error.absolute_path:
        parts.append(f"[{p}]" if isinstance(p, int) else ("." if parts else "") + one_line(str(p), 80))
    return "".join(parts) or "(top level)"
