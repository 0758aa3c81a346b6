"""Teams: which connections a folder of audit and mode files may name.

A folder of files belongs to a team, and the operator lists, per team, its folders and the
connections they may name with each one's type (`SEMANTICS_TEAMS`, a YAML file of the operator's):

    teams:
      payments:
        folders: [/srv/semantics/payments]     # absolute, or relative to this file
        connections: {kafka_payments: kafka, payments_outbox: postgres, payments_mail: smtp}

A file names only its team's connections, each in a role its type fills (a Kafka cluster for
`connections.kafka`, a database for an outbox or a sink, a notifier's own type), and never one of
the platform's own (the ledger, Spark, Connect, the fault proxy): those hold every team's results,
or its cluster. Without SEMANTICS_TEAMS the platform serves one team, whose files may name any
connection but the platform's; a connection's type is still checked against its role when it is
resolved. This module imports yaml only when the operator's file is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from delivery_semantics import locations
from delivery_semantics.files import one_line, read_yaml

# What a file names a connection for, and the Airflow connection types that fill that role.
ROLE_TYPES = {
    "kafka": ("kafka",),
    "outbox": ("postgres", "mysql"),
    "sink": ("postgres", "mysql"),
    "smtp": ("smtp",),
    "slack": ("slack", "slackwebhook"),
}
# The platform's own connections: a file never names them, whatever a team's list says.
PLATFORM_CONNECTIONS = ("ledger_db", "spark_default", "toxiproxy_default", "kafka_connect", "kafka_connect_eos")


class TeamError(ValueError):
    """The operator's team file cannot be used: one line."""


@dataclass(frozen=True)
class Team:
    name: str
    folders: tuple[Path, ...]
    connections: dict[str, str]

    def owns(self, path: Path) -> bool:
        folder = path.resolve().parent
        return any(folder == f or folder.is_relative_to(f) for f in self.folders)


def platform_connections() -> set[str]:
    """The platform's connections, and any the operator adds (SEMANTICS_PLATFORM_CONNECTIONS,
    comma separated: a ledger or Spark connection under another id)."""
    extra = {c.strip() for c in (locations.setting("platform_connections") or "").split(",") if c.strip()}
    return {*PLATFORM_CONNECTIONS, *extra}


def teams() -> list[Team] | None:
    """The operator's teams, or None when the platform serves one team (no SEMANTICS_TEAMS)."""
    configured = locations.setting("teams")
    if not configured:
        return None
    path = Path(configured)
    spec = read_yaml(path, TeamError)
    if not isinstance(spec, dict) or not isinstance(spec.get("teams"), dict):
        raise TeamError(f"{path}: SEMANTICS_TEAMS: a mapping `teams:` of team name to folders and connections")
    found = []
    for name, team in spec["teams"].items():
        if not isinstance(team, dict) or set(team) - {"folders", "connections"}:
            raise TeamError(one_line(f"{path}: teams.{name}: give folders and connections only"))
        folders = team.get("folders") or []
        connections = team.get("connections") or {}
        if not isinstance(folders, list) or not all(isinstance(f, str) and f for f in folders):
            raise TeamError(one_line(f"{path}: teams.{name}.folders: a list of folders"))
        if not isinstance(connections, dict) or not all(
            isinstance(t, str) and t in {x for ts in ROLE_TYPES.values() for x in ts} for t in connections.values()
        ):
            kinds = sorted({x for ts in ROLE_TYPES.values() for x in ts})
            raise TeamError(one_line(f"{path}: teams.{name}.connections: connection id: its type, one of {kinds}"))
        found.append(
            Team(
                str(name),
                tuple((path.parent / f).resolve() for f in folders),
                {str(k): v for k, v in connections.items()},
            )
        )
    return found


def check_connection(file: Path, conn_id: str, role: str, where: str) -> None:
    """A file may name `conn_id` for `role`: not the platform's own, and, when teams are set, one
    of the connections its folder's team lists, of a type the role takes. Raises TeamError."""
    if conn_id in platform_connections():
        raise TeamError(f"{where}: {conn_id} is one of the platform's own connections: a file never names it")
    found = teams()
    if found is None:
        return
    team = next((t for t in found if t.owns(file)), None)
    if team is None:
        raise TeamError(
            f"{where}: the folder {file.resolve().parent} belongs to no team: the operator lists it under a team "
            "in SEMANTICS_TEAMS"
        )
    conn_type = team.connections.get(conn_id)
    if conn_type is None:
        allowed = ", ".join(sorted(team.connections)) or "none"
        raise TeamError(
            one_line(f"{where}: {conn_id} is not a connection of team {team.name}, whose files may name: {allowed}")
        )
    if conn_type not in ROLE_TYPES[role]:
        raise TeamError(f"{where}: {conn_id} is a {conn_type} connection; {role} takes {' or '.join(ROLE_TYPES[role])}")


def check_type(conn_id: str, conn_type: str, role: str) -> None:
    """A resolved connection fills its role: a database's password never becomes a SASL password."""
    if conn_type not in ROLE_TYPES[role]:
        raise TeamError(
            f"connection {conn_id!r} is of type {conn_type or '(none)'!r}; {role} takes {' or '.join(ROLE_TYPES[role])}"
        )
