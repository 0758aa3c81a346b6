"""Audits of a team's own pipeline, as files: `audits/<name>.yaml`, one per topic and outbox,
validated against `audit.schema.json`. An audit names Airflow connections, never secrets; the
table and column names in it are validated as SQL identifiers and quoted, and free SQL is taken
only where the file says `allow_query: true`, and runs in a read-only transaction.

The DAG file `dags/semantics_audits.py` makes one DAG per file; `local/semantics audit run NAME`
runs one from the command line, and `local/semantics reconcile --mapping FILE` runs a file once.
This module imports only yaml and jsonschema at its top: the DAG file parses it.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from delivery_semantics import budgets, catalog, locations, teams
from delivery_semantics.audit import AuditError
from delivery_semantics.files import control, field_path, first_error, one_line, read_yaml, total
from delivery_semantics.files import discover as discover_files

SCHEMA_FILE = ("audit", "audit.schema.json")
AUDIT_SCENARIO = "audit"
DEFAULT_SINK_STRATEGY = "process_then_commit"
# A continuous audit keeps a week of sightings unless it says otherwise (window.dedup_horizon).
DEFAULT_DEDUP_HORIZON = "7d"
# The consumer strategies a sink table can be judged against: the copier's output is a topic.
SINK_STRATEGIES = ("commit_before_process", "process_then_commit", "process_then_commit_dedup")
_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_NAME = re.compile(r"[A-Za-z0-9_-]{1,200}")
# Hadoop's glob characters (and its escape): a lakehouse path Spark would expand is never a path.
_GLOB = set("*?[]{}\\^")
# The Spark settings an audit may give its application, each with the form of its value: sizes only.
# Anything that adds code or reaches elsewhere (spark.jars, spark.*.extraJavaOptions, plugins,
# listeners, the event log's folder) is the operator's, in the Spark connection.
_MEMORY, _COUNT, _BOOL = r"[0-9]{1,6}[kmgt]?b?", r"[0-9]{1,6}", r"true|false"
SPARK_SETTINGS = {
    "spark.driver.memory": _MEMORY,
    "spark.driver.cores": _COUNT,
    "spark.driver.maxResultSize": _MEMORY,
    "spark.executor.memory": _MEMORY,
    "spark.executor.memoryOverhead": _MEMORY,
    "spark.executor.cores": _COUNT,
    "spark.executor.instances": _COUNT,
    "spark.cores.max": _COUNT,
    "spark.default.parallelism": _COUNT,
    "spark.sql.shuffle.partitions": _COUNT,
    "spark.sql.files.maxPartitionBytes": _MEMORY,
    "spark.sql.adaptive.enabled": _BOOL,
    "spark.sql.adaptive.coalescePartitions.enabled": _BOOL,
    "spark.sql.adaptive.advisoryPartitionSizeInBytes": _MEMORY,
    "spark.sql.adaptive.skewJoin.enabled": _BOOL,
}
# Fields of the one-off mapping files this format replaced: a pointer rather than a bare refusal.
_FORMER_FIELDS = {
    "reconciliation_id": "the id is made per run (audit:<name>:<run>)",
    "bootstrap_servers": "Kafka comes from connections.kafka",
    "kafka_options": "client settings live in the Kafka connection's extra",
    "ledger": "the table is described under outbox",
    "event_id": "record fields go under record",
}


@dataclass(frozen=True)
class Audit:
    name: str
    path: Path
    spec: dict

    @property
    def dag_id(self) -> str:
        return f"audit_{self.name}"

    @property
    def topic(self) -> str:
        return self.spec["topic"]

    @property
    def judged_as(self) -> str:
        """The delivery mode or connector pipeline whose promise the verdict judges."""
        return self.spec.get("pipeline") or self.spec["mode"]

    @property
    def schedule(self) -> str | None:
        return self.spec.get("schedule")

    @property
    def kafka_conn_id(self) -> str:
        return self.spec["connections"]["kafka"]

    @property
    def outbox_conn_id(self) -> str:
        return self.spec["connections"]["outbox"]

    @property
    def record(self) -> dict:
        return self.spec["record"]

    @property
    def outbox(self) -> dict:
        return self.spec["outbox"]

    @property
    def transactional(self) -> bool | None:
        return self.spec.get("transactional")

    @property
    def windowed(self) -> bool:
        return "window" in self.spec

    @property
    def grace(self) -> timedelta:
        return parse_duration(self.spec["window"]["grace"])

    @property
    def dedup_horizon(self) -> timedelta:
        """How long a continuous audit keeps its sightings to find later copies of an event id."""
        return parse_duration(self.spec["window"].get("dedup_horizon", DEFAULT_DEDUP_HORIZON))

    @property
    def dedup_copy(self) -> dict:
        """The audit's `dedup_copy:` section, its path made the audit folder's and checked against the roots."""
        section = dict(self.spec.get("dedup_copy") or {})
        if section.get("path"):
            section["path"] = self.data_path(section["path"], "dedup_copy.path")
        return section

    def data_path(self, text: str, field: str) -> str:
        """A lakehouse folder or URI the file names, relative ones the audit folder's: refused
        unless it lies under one of the operator's data roots (data_roots)."""
        roots = data_roots(self)
        # What Spark reads must be what is checked here: a glob would expand beyond it, and a URI's
        # '..' climbs out of a root matched as a prefix. A local folder is resolved (links and '..')
        # here, and readers get the resolved folder.
        bad = next((c for c in text if c in _GLOB or control(c)), None)
        if bad is not None or ("://" in text and ".." in re.split(r"[/\\]", text.split("://", 1)[1])):
            what = (
                "climbs with '..'"
                if bad is None
                else f"holds the control character U+{ord(bad):04X}"
                if control(bad)
                else f"holds {bad!r}: Spark would read it as a pattern"
            )
            raise AuditError(one_line(f"{self.where(field)}: {text}: {what}; give a plain folder or URI"))
        if "://" in text:
            if any(text.startswith(r.rstrip("/") + "/") or text == r for r in roots if "://" in r):
                return text
        else:
            path = (self.path.resolve().parent / text).resolve()
            if any(path.is_relative_to(Path(r).resolve()) for r in roots if "://" not in r):
                return str(path)
        raise AuditError(
            one_line(
                f"{self.where(field)}: {text}: outside the data roots the operator allows ({', '.join(roots)}; "
                "SEMANTICS_DATA_ROOTS)"
            )
        )

    @property
    def spark_conf(self) -> dict[str, str]:
        """The audit's `spark:` section, as spark-submit takes it."""
        return {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in self.spec.get("spark", {}).items()}

    @property
    def sink(self) -> dict | None:
        return self.spec.get("sink")

    @property
    def sink_label(self) -> str | None:
        """The sink as the results name it: its table, or a lakehouse table's format and path."""
        if self.sink is None:
            return None
        return self.sink["table"] if "table" in self.sink else f"{self.sink['store']}:{self.sink['path']}"

    @property
    def sink_conn_id(self) -> str | None:
        return self.spec["connections"].get("sink")

    @property
    def sink_strategy(self) -> str:
        return (self.sink or {}).get("strategy", DEFAULT_SINK_STRATEGY)

    @property
    def alerts(self) -> dict:
        return self.spec.get("alerts", {})

    def where(self, field: str) -> str:
        return f"{self.path}: {field}"


def data_roots(audit: Audit) -> list[str]:
    """Where an audit's sink and copy may be: SEMANTICS_DATA_ROOTS (folders or URI prefixes, comma
    separated), else the platform's lakehouse and the audit file's own folder."""
    configured = [r.strip() for r in (locations.setting("data_roots") or "").split(",") if r.strip()]
    if configured:
        return configured
    return [locations.lakehouse(), str(audit.path.resolve().parent)]


def pipelines_dir() -> Path:
    """Where a connector pipeline's run writes the audit it makes for itself (catalog.PLATFORM_AUDIT_PREFIX)."""
    return locations.pipelines_dir()


def platform_file(path: Path) -> bool:
    """An audit the platform wrote for one of its own runs: in pipelines_dir, no team's."""
    return path.resolve().parent == pipelines_dir().resolve()


def audits_dir() -> Path:
    return locations.audits_dir()


def _schema() -> dict:
    return json.loads(locations.package_text(*SCHEMA_FILE))


def _message(error) -> str:
    """jsonschema's error, said for a person editing the file."""
    schema = error.schema if isinstance(error.schema, dict) else {}
    v = error.validator
    if v == "additionalProperties":
        extra = sorted(map(str, set(error.instance) - set(schema.get("properties", {}))))
        hints = [f"{k!r} ({_FORMER_FIELDS[k]})" for k in extra if k in _FORMER_FIELDS and not error.absolute_path]
        allowed = ", ".join(schema.get("properties", {}))
        return f"unknown field {', '.join(hints) or ', '.join(map(repr, extra))}; allowed: {allowed}"
    if v == "pattern":
        return f"{error.instance!r} is not {schema.get('description') or 'a string matching ' + schema['pattern']}"
    alternatives = schema.get("oneOf", [])
    if v == "oneOf" and all(set(alt) == {"required"} for alt in alternatives):
        return f"give exactly one of {' or '.join(alt['required'][0] for alt in alternatives)}"
    if v == "oneOf":
        return (
            f"{json.dumps(error.instance)} is not a field: use one of {{header: NAME}}, {{field: a.b}}, "
            "{json: $.path}, {key_field: a.b}, {record_key: true}, {value: true}, {timestamp: true}"
        )
    if v == "dependentRequired" and "allow_query" in error.message:
        return "query is free SQL: it needs allow_query: true (and runs in a read-only transaction)"
    if v == "dependentRequired":
        needs = {f: d for f, d in error.validator_value.items() if f in error.instance and set(d) - set(error.instance)}
        return "; ".join(f"{f} needs {', '.join(d)}" for f, d in needs.items()) or error.message
    return error.message


def validate(spec, where: str) -> None:
    """Raises AuditError naming `where` (the file) and the first bad field."""
    if not isinstance(spec, dict):
        raise AuditError(f"{where}: an audit is a mapping of fields, not {type(spec).__name__}")
    e = first_error(_schema(), spec)
    if e is not None:
        raise AuditError(one_line(f"{where}: {field_path(e)}: {_message(e)}"))
    sink = spec.get("sink")
    if sink is not None and "format" in sink:
        # The sink's store was once its `format`, a word the record's format also takes: such files keep working.
        if "store" in sink:
            raise AuditError(f"{where}: sink: store and format (its older name) are one field: give store")
        sink["store"] = sink.pop("format")
    if ("mode" in spec) == ("pipeline" in spec):
        raise AuditError(f"{where}: give mode (a delivery mode) or pipeline (a connector pipeline), one of them")
    if "pipeline" in spec and spec["pipeline"] not in catalog.PIPELINES:
        raise AuditError(
            f"{where}: pipeline: {spec['pipeline']!r} is not a connector pipeline; use one of "
            f"{', '.join(catalog.PIPELINES)}"
        )
    # `mode: <pipeline>` is how files named a pipeline before `pipeline:`; they keep working.
    if "mode" in spec and spec["mode"] not in catalog.MODES and spec["mode"] not in catalog.PIPELINES:
        raise AuditError(
            f"{where}: mode: {spec['mode']!r} is not a delivery mode; use one of {', '.join(catalog.MODES)} "
            "(or pipeline: for a connector pipeline)"
        )
    judged = spec.get("pipeline") or spec["mode"]
    subject = catalog.MODES.get(judged) or catalog.PIPELINES[judged]
    window = spec.get("window") or {}
    if "dedup_horizon" in window and parse_duration(window["dedup_horizon"]) <= parse_duration(window["grace"]):
        raise AuditError(
            f"{where}: window.dedup_horizon: {window['dedup_horizon']} must be longer than the grace "
            f"({window['grace']}): a window's sightings are needed until its late records are due"
        )
    if spec.get("transactional") and not subject.transactional:
        what = "pipeline" if "pipeline" in spec else "mode"
        raise AuditError(f"{where}: transactional: true, but {what} {judged} does not write transactions")
    if "max_open_discrepancies" in spec.get("alerts", {}) and "window" not in spec:
        raise AuditError(
            f"{where}: alerts.max_open_discrepancies: counts a continuous audit's windows: it needs window"
        )
    for field, role, conn_id in named_connections(spec) if not platform_file(Path(where)) else ():
        try:
            teams.check_connection(Path(where), conn_id, role, f"{where}: {field}")
        except teams.TeamError as e:
            raise AuditError(str(e)) from None
    if "query" in spec.get("outbox", {}):
        from delivery_semantics.audit.stores.sql import free_select

        free_select(spec["outbox"]["query"], f"{where}: outbox.query")
    check_record(spec["record"], where)
    check_sink(spec, where)
    for key, value in spec.get("spark", {}).items():
        text = str(value).lower()
        if not re.fullmatch(SPARK_SETTINGS[key], text):
            raise AuditError(
                one_line(f"{where}: spark.{key}: {text!r} is not a size of the form {SPARK_SETTINGS[key]}")
            )
    try:
        budgets.check_spark({k: str(v).lower() for k, v in spec.get("spark", {}).items()}, where)
        budgets.check_schedule(spec.get("schedule"), where)
    except budgets.BudgetError as e:
        raise AuditError(one_line(str(e))) from None
    strategy = spec.get("sink", {}).get("strategy")
    if strategy is not None and strategy not in SINK_STRATEGIES:
        raise AuditError(
            f"{where}: sink.strategy: {strategy!r} is not a sink strategy; use one of {', '.join(SINK_STRATEGIES)}"
        )


def named_connections(spec: dict) -> list[tuple[str, str, str]]:
    """Each connection a (schema-valid) audit names, as (field, role, connection id); a notifier's
    default connection too."""
    named = [(f"connections.{role}", role, conn_id) for role, conn_id in spec["connections"].items()]
    for notifier, given in (spec.get("alerts") or {}).get("notifier", {}).items():
        field = f"{notifier}_conn_id"
        named.append((f"alerts.notifier.{notifier}.{field}", notifier, given.get(field, NOTIFIER_DEFAULTS[notifier])))
    return named


# The field specs that read a value, and those that read a key (each format says which it takes).
_VALUE_SPECS, _KEY_SPECS = ("json", "field", "value"), ("record_key", "key_field")


def check_record(record: dict, where: str) -> None:
    """Each field spec reads what the record's formats hold: `field` a decoded value's field (or a
    JSON one), `key_field` an Avro key's, `value` a text value, `json` a JSON value."""
    from delivery_semantics.audit.formats import FORMATS, KEY_FORMATS

    value, key = record.get("format", "json"), record.get("key_format", "string")
    for field, name, known in (("format", value, FORMATS), ("key_format", key, KEY_FORMATS)):
        if name not in known:
            raise AuditError(f"{where}: record.{field}: {name!r} is not one of {', '.join(known)}")
    value_specs, key_specs = FORMATS[value].value_specs, FORMATS[key].key_specs
    for name in ("event_id", "key", "seq", "publish_at"):
        spec_key = next(iter(record.get(name) or {None: None}))
        if spec_key in _VALUE_SPECS and spec_key not in value_specs:
            allowed = " or ".join(f"{{{k}: ...}}" for k in value_specs)
            raise AuditError(
                f"{where}: record.{name}: {{{spec_key}: ...}} does not read a {value} value; use {allowed}"
            )
        if spec_key in _KEY_SPECS and spec_key not in key_specs:
            allowed = " or ".join(f"{{{k}: ...}}" for k in key_specs)
            raise AuditError(f"{where}: record.{name}: {{{spec_key}: ...}} does not read a {key} key; use {allowed}")
    for side, fmt, schemas in (("value", value, "schemas"), ("key", key, "key_schemas")):
        if schemas in record and FORMATS[fmt].schemas is None:
            raise AuditError(f"{where}: record.{schemas}: a {fmt} {side} has no schemas")


def check_sink(spec: dict, where: str) -> None:
    """A database sink names its table and its connection; a lakehouse sink its path, and no
    connection (it has none)."""
    sink = spec.get("sink")
    if sink is None:
        if "sink" in spec["connections"]:
            raise AuditError(f"{where}: connections.sink: names the sink's database, and the audit has no sink")
        return
    store = sink.get("store", "jdbc")
    if store == "jdbc":
        if "table" not in sink:
            raise AuditError(f"{where}: sink.table: a jdbc sink needs its table")
        if "sink" not in spec["connections"]:
            raise AuditError(f"{where}: connections.sink: a jdbc sink needs its database's connection")
        if "path" in sink:
            raise AuditError(f"{where}: sink.path: a jdbc sink is a table; path is for delta or parquet")
        return
    if "path" not in sink:
        raise AuditError(f"{where}: sink.path: a {store} sink is the table at a path: give it")
    if "table" in sink or "sink" in spec["connections"]:
        field = "sink.table" if "table" in sink else "connections.sink"
        raise AuditError(f"{where}: {field}: a {store} sink is read from its path, with no database")


DEFAULT_MIN_ID_SHARE = 0.01


def id_place(spec: dict) -> str:
    """Where a field spec reads, said for a person: header id, JSON path $.id, field order.id."""
    reads, where = next(iter(spec.items()))
    return {
        "header": f"header {where}",
        "json": f"JSON path {where}",
        "field": f"field {where}",
        "key_field": f"key field {where}",
        "record_key": "a record key",
        "value": "a value",
        "timestamp": "a timestamp",
    }.get(reads, f"{reads} {where}")


def mapping_suspect(audit: Audit, records_read: int | None, malformed: int | None) -> str | None:
    """One plain line when no record, or almost none (under record.min_id_share of those read),
    carries an event id where the file says: almost always a mistake in the file (a misspelt
    header or path), not a loss in the pipeline. None when enough do, or nothing was read."""
    read, without = int(records_read or 0), int(malformed or 0)
    if read == 0:
        return None
    with_id = read - without
    share = float(audit.record.get("min_id_share", DEFAULT_MIN_ID_SHARE))
    if with_id >= share * read and with_id > 0:
        return None
    lead = "no record" if with_id == 0 else "almost no record"
    return (
        f"{lead} of topic {audit.topic} has {id_place(audit.record['event_id'])}; "
        f"{with_id:,} of {read:,} records carry an event id"
    )


def parse_duration(text: str) -> timedelta:
    """'90s', '15m', '2h', '1d' (the schema's pattern)."""
    return timedelta(seconds=int(text[:-1]) * _DURATION_UNITS[text[-1]])


def load(name_or_path: str | Path) -> Audit:
    """An audit by name (audits/<name>.yaml) or by path; YAML or JSON. Any failure is AuditError,
    one line naming the file."""
    return total(Path(name_or_path), AuditError, _load)


def _load(name_or_path: str | Path) -> Audit:
    p = Path(name_or_path)
    if p.suffix not in (".yaml", ".yml", ".json"):
        if not _NAME.fullmatch(str(name_or_path)):
            raise AuditError(f"{name_or_path!r} is neither an audit name ([A-Za-z0-9_-]) nor a .yaml/.json file")
        p = audits_dir() / f"{name_or_path}.yaml"
    name = p.stem
    if not _NAME.fullmatch(name):
        raise AuditError(f"{p}: the file name makes the audit's name, and {name!r} is not [A-Za-z0-9_-]")
    if name.startswith(catalog.PLATFORM_AUDIT_PREFIX) != platform_file(p):
        raise AuditError(
            f"{p}: names beginning {catalog.PLATFORM_AUDIT_PREFIX} are the connector pipelines' runs' audits, and only "
            "theirs: name the file otherwise"
        )
    spec = read_yaml(p, AuditError)
    validate(spec, str(p))
    audit = Audit(name, p, spec)
    if (spec.get("sink") or {}).get("path"):
        audit.data_path(spec["sink"]["path"], "sink.path")
    if (spec.get("dedup_copy") or {}).get("path"):
        audit.data_path(spec["dedup_copy"]["path"], "dedup_copy.path")
    return audit


def discover(directory: Path | None = None) -> list[tuple[str, Audit | AuditError]]:
    """Every audits/*.yaml, each loaded or its error: one bad file does not hide the others."""
    return discover_files(directory or audits_dir(), AuditError, load)


def window_id(audit: Audit, window_end: datetime) -> str:
    """A continuous audit's window is named by its end, so a rerun and a backfill of the same
    window are one reconciliation."""
    return f"audit:{audit.name}:{window_end.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%SZ')}"


def window_end(text: str | datetime) -> datetime:
    """A window's end from an ISO 8601 time with its zone, in UTC and whole seconds, refused when it
    is later than now: such a window would read to the topic's end and be recorded, the next
    scheduled window would be refused, and an outbox row created before that end but published
    after it would be judged by no window."""
    try:
        t = text if isinstance(text, datetime) else datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise AuditError(f"{text!r} is not an ISO 8601 time (such as 2026-11-23T14:00:00Z)") from None
    if t.tzinfo is None:
        raise AuditError(f"{text!r} has no time zone: give one, such as 2026-11-23T14:00:00Z")
    end, now = t.astimezone(UTC).replace(microsecond=0), datetime.now(UTC)
    if end > now:
        raise AuditError(
            f"the window end {end.isoformat()} is in the future (now {now.replace(microsecond=0).isoformat()}): "
            "a window never ends after now"
        )
    return end


# A continuous audit's sightings partitions, by the prefix sightings_partition(name) gives; `mark`
# is the driver's parameter marker (? for JDBC, %s for psycopg2).
SIGHTINGS_PARTITIONS = (
    "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
    "WHERE i.inhparent = 'audit_sightings'::regclass AND starts_with(c.relname, {mark}) ORDER BY 1"
)


def sightings_partition(audit_name: str, window_end: datetime | None = None) -> str:
    """The audit_sightings partition of one window (the audit's hash and the window's end, epoch
    seconds), or without a window the prefix all of the audit's share."""
    tag = hashlib.sha1(audit_name.encode(), usedforsecurity=False).hexdigest()[:12]
    prefix = f"audit_sightings_{tag}_"
    return prefix if window_end is None else f"{prefix}{int(window_end.timestamp())}"


def forget_state(cur, audit_name: str) -> dict[str, int]:
    """Drops an audit's state (a psycopg2 cursor): its sightings partitions, its sightings in the
    default partition and its pending records. Its windows' results stay. For an audit that will
    not run again (a pipeline run's, once totalled), or one that starts over. Returns the counts."""
    cur.execute(SIGHTINGS_PARTITIONS.format(mark="%s"), (sightings_partition(audit_name),))
    tables = [t for (t,) in cur.fetchall()]
    for t in tables:
        cur.execute(f'DROP TABLE "{t}"')
    cur.execute("DELETE FROM audit_sightings_default WHERE audit = %s", (audit_name,))
    default_rows = cur.rowcount
    cur.execute("DELETE FROM audit_pending WHERE audit = %s", (audit_name,))
    return {"partitions": len(tables), "default_sightings": default_rows, "pending": cur.rowcount}


def reconciliation_id(audit: Audit, run_id: str | None = None) -> str:
    """One id per audit run: rerunning the same Airflow run reads the same offsets and rewrites
    the same rows."""
    return f"audit:{audit.name}:{run_id or 'manual__' + datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}"


# --------------------------------------------------------------------------- SQL


# --------------------------------------------------------------------------- alerts


NOTIFIERS = {  # notifier: (module, class, provider package)
    "smtp": ("airflow.providers.smtp.notifications.smtp", "SmtpNotifier", "apache-airflow-providers-smtp"),
    "slack": ("airflow.providers.slack.notifications.slack", "SlackNotifier", "apache-airflow-providers-slack"),
}


# The connection each notifier's provider uses when the file names none.
NOTIFIER_DEFAULTS = {"smtp": "smtp_default", "slack": "slack_api_default"}
SLACK_TEXT = "Audit DAG {{ dag.dag_id }}: task {{ ti.task_id }} failed in run {{ run_id }}"


def failure_callback(audit: Audit):
    """The audit's notifier as an Airflow failure callback, or None. The provider is imported when
    the callback fires, not when the DAG file is parsed."""
    spec = audit.alerts.get("notifier")
    if not spec:
        return None
    ((notifier, given),) = spec.items()
    # Recipients and a connection from the file (the schema allows no other key); the message is the
    # platform's, so that a file can neither attach a file nor render a template of its own.
    if notifier == "smtp":
        kwargs = {"to": given["to"], "smtp_conn_id": given.get("smtp_conn_id", NOTIFIER_DEFAULTS["smtp"])}
    else:
        kwargs = {
            "channel": given["channel"],
            "slack_conn_id": given.get("slack_conn_id", NOTIFIER_DEFAULTS["slack"]),
            "text": SLACK_TEXT,
        }

    def notify(context):
        import importlib

        check_notifier(audit)
        module, cls, _ = NOTIFIERS[notifier]
        getattr(importlib.import_module(module), cls)(**kwargs)(context)

    return notify


# --------------------------------------------------------------------------- before anything runs


def check_notifier(audit: Audit) -> None:
    """The notifier's provider is installed: a failure would otherwise go unreported."""
    import importlib.util

    for notifier in audit.alerts.get("notifier", {}):
        module, _, provider = NOTIFIERS[notifier]
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        if not found:
            raise AuditError(f"{audit.path}: alerts.notifier.{notifier}: {provider} is not installed")


def check_notifier_connection(audit: Audit) -> None:
    """The notifier's connection is there and is of its type: a failure would otherwise go unreported,
    or reach a connection that is not a notifier's."""
    from delivery_semantics.plumbing.endpoints import EndpointError, get_connection

    for field, role, conn_id in named_connections(audit.spec):
        if role in NOTIFIER_DEFAULTS:  # Kafka's and the stores' types are checked where they are resolved
            try:
                teams.check_type(conn_id, get_connection(conn_id).conn_type, role)
            except (EndpointError, teams.TeamError) as e:
                raise AuditError(f"{audit.path}: {field}: {e}") from None


def check_window_order(audit: Audit, window_ends: list[datetime]) -> None:
    """Each window follows the latest one recorded, or is a recorded one run again: a window's rows
    depend on the windows before it."""
    from delivery_semantics.plumbing.db import query

    recorded = {r["window_end"] for r in query("SELECT window_end FROM audit_windows WHERE audit = %s", (audit.name,))}
    latest = max(recorded, default=None)
    for end in sorted(window_ends):
        if end not in recorded and latest is not None and end < latest:
            raise AuditError(
                f"{audit.path}: the window ending {end.isoformat()} was never run and a later one (ending "
                f"{latest.isoformat()}) was: windows run in order; rerun a recorded window or run one after the latest"
            )
        latest = max(latest or end, end)
