"""The local stack's registry: one Service object per service, made in its own module, that
`local/stack` loops over to start, stop and show them, and whose connections make the stack's
environment. No service runs here: this is what the registry says, not what the processes do
(tests/integration/test_stack.py starts and stops them)."""

import pytest
from conftest import REPO


@pytest.fixture(autouse=True)
def _local_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "local"))


def test_each_service_is_named_once_and_starts_after_what_it_needs():
    from devstack.services import SERVICES

    names = [s.name for s in SERVICES]
    assert len(set(names)) == len(names)
    for i, s in enumerate(SERVICES):
        assert set(s.needs) <= set(names[:i]), f"{s.name} needs {s.needs}, which start after it"


def test_a_service_named_starts_with_what_it_needs_in_the_registrys_order():
    from devstack.commands import with_needs

    assert [s.name for s in with_needs(["connect"])] == ["tls", "toxiproxy", "oidc", "kafka", "connect"]
    assert [s.name for s in with_needs(["spark", "mariadb"])] == ["mariadb", "spark"]


def test_status_shows_every_process_of_every_service():
    from devstack.services import SERVICES

    shown = [p.name for s in SERVICES for p in s.processes]
    assert shown == [
        "postgres",
        "postgres-cdc",
        "mariadb",
        "toxiproxy",
        "oidc",
        "broker-1",
        "broker-2",
        "broker-3",
        "connect-1",
        "connect-2",
        "connect-eos-1",
        "connect-eos-2",
        "spark-master",
        "spark-worker",
        "spark-connect",
    ]


def test_the_environment_publishes_each_services_own_connections():
    import devstack
    from devstack.services import SERVICES

    env = devstack.environment()
    published = {k.removeprefix("AIRFLOW_CONN_").lower() for k in env if k.startswith("AIRFLOW_CONN_")}
    owned = {conn_id for s in SERVICES for conn_id in s.connections()}
    assert owned <= published
    assert published - owned == {"smtp_alerts", "spark_default"}  # the mail catcher's, and local Spark


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["start", "kafak"], "no service named 'kafak'; the services: postgres, postgres-cdc, mariadb"),
        (["stop", "connect", "airflow"], "no service named 'airflow'"),
        (["status", "kafka"], "only start and stop take service names, not status"),
    ],
)
def test_a_wrong_service_name_is_refused_in_one_line_before_anything_starts(argv, message, capsys):
    from devstack.commands import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.strip().count("\n") == 0
