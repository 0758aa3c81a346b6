"""The loopback host the stack listens on, and its ports: free before a start, open once up, and
kept out of the kernel's ephemeral range."""

from __future__ import annotations

import socket
from pathlib import Path

from devstack.processes import StackError

HOST = "127.0.0.1"


def reserve_ports(ports) -> None:
    """The stack's listening ports that lie in the kernel's ephemeral range, taken out of it: an
    outgoing connection that picked one made a restarted broker fail to bind ("Address already in
    use"). Needs root; elsewhere it does nothing, and a collision stays possible."""
    reserved = Path("/proc/sys/net/ipv4/ip_local_reserved_ports")
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
        current = reserved.read_text().strip()
        have = set()
        for part in filter(None, current.split(",")):
            a, _, b = part.partition("-")
            have.update(range(int(a), int(b or a) + 1))
        missing = sorted(p for p in ports if low <= p <= high and p not in have)
        if missing:
            reserved.write_text(",".join(filter(None, [current, *map(str, missing)])))
    except (OSError, ValueError):
        pass


def port_open(port: int, host: str = HOST, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def require_port_free(port: int, component: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError as e:
            raise StackError(
                f"{component}: port {HOST}:{port} is already taken by another process ({e.strerror}); "
                f"stop that process or free the port, then run start again"
            ) from None
