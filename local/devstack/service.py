"""What every service of the local stack is to `local/stack`: one object per service, made in the
service's own module, that owns its facts (how it starts and stops, its processes, the
connections it publishes, the services it needs first), as kafkatest's services are. `commands`
loops over the registry (`SERVICES` there); a new service is its module plus one line there."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from devstack.ports import port_open


@dataclass(frozen=True)
class Process:
    """One process of a service, as `status` shows it: up once it runs and its port answers."""

    name: str
    port: int
    pid: Callable[[], int | None]
    shown_port: str | None = None  # what status prints, when it is not just `port`

    def up(self) -> bool:
        return bool(self.pid()) and port_open(self.port)


@dataclass(frozen=True)
class Service:
    """`start` is idempotent and reports its own lines; `stop` keeps data. `needs`: the services
    that must be up first (started with this one when asked for by name)."""

    name: str
    start: Callable[[], None]
    stop: Callable[[], None] = lambda: None
    processes: tuple[Process, ...] = ()
    connections: Callable[[], dict[str, dict]] = field(default=dict)
    needs: tuple[str, ...] = ()
