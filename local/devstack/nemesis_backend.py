"""The nemesis's backend on the local stack: the broker and Connect worker processes `local/stack`
started, by pid, and the connector pipelines' outbox database.
The production nemesis gets it as an argument; var/stack.env names it in
SEMANTICS_NEMESIS_BACKEND."""

from __future__ import annotations

import os
import signal
import time

from delivery_semantics.faults.nemesis import Backend, NemesisError
from devstack.connect import kill_worker, start_worker, stop_worker, wait_for_worker, worker_named
from devstack.kafka import BROKER_IDS, BROKERS, broker_pid, fetches_from, links_of, start_broker, stop_broker
from devstack.postgres import CDC, restart_postgres


class ProcessBackend(Backend):
    """The nemesis's `local` backend: the broker processes this stack started, by pid."""

    name = "local"
    broker_ids = BROKER_IDS

    def _pid(self, node_id: int) -> int:
        pid = broker_pid(BROKERS[node_id - 1])
        if pid is None:
            raise NemesisError(f"broker-{node_id} is not running")
        return pid

    def kill(self, node_id: int) -> None:
        os.kill(self._pid(node_id), signal.SIGKILL)
        deadline = time.monotonic() + 10
        while broker_pid(BROKERS[node_id - 1]) and time.monotonic() < deadline:
            time.sleep(0.1)

    def start(self, node_id: int) -> None:
        start_broker(BROKERS[node_id - 1])

    def pause(self, node_id: int) -> None:
        os.kill(self._pid(node_id), signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        pid = broker_pid(BROKERS[node_id - 1])
        if pid:
            os.kill(pid, signal.SIGCONT)

    def is_running(self, node_id: int) -> bool:
        return broker_pid(BROKERS[node_id - 1]) is not None

    def stop(self, node_id: int) -> None:
        stop_broker(BROKERS[node_id - 1], grace=60)

    def kill_worker(self, worker_id: str) -> None:
        kill_worker(worker_named(worker_id))

    def stop_worker(self, worker_id: str) -> None:
        stop_worker(worker_named(worker_id))

    def start_worker(self, worker_id: str) -> None:
        w = worker_named(worker_id)
        start_worker(w)
        wait_for_worker(w)

    def restart_outbox_db(self) -> None:
        restart_postgres(CDC, mode="fast")

    def link_proxies(self, node_id: int) -> list[str]:
        return links_of(node_id)

    def fetch_proxies(self, node_id: int) -> list[str]:
        return fetches_from(node_id)
