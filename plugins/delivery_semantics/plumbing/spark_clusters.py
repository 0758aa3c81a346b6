"""Where a platform Spark application's driver runs, and how the environment it reads (the results
database, Kafka's credentials, an audit's stores: spark_submit.spark_application_env) reaches it
without ever being on a command line. One object per cluster manager, picked by the master URL:

- local and standalone (`local[...]`, `spark://`): client mode. The driver is spark-submit's own JVM
  on this worker, and reads the environment of its process. (A standalone master runs no Python
  application in cluster mode: spark-submit refuses it.)
- Spark Connect (`sc://HOST:PORT`): the driver is the Connect server; the application runs here as
  a Python process (no spark-submit, no JDK on the worker), reads the environment of its process,
  sends its plans over gRPC with the connection's password as the bearer token
  (SPARK_CONNECT_AUTHENTICATE_TOKEN), and adds the platform's Python files to its session for the
  server's Python workers.
- YARN (`yarn`): cluster mode. The secrets go in a credentials file, private to this worker until
  spark-submit uploads it to the application's staging folder, shipped with --files; the driver
  reads it from its working directory (SEMANTICS_APPLICATION_ENV names the file, no secret).
- Kubernetes (`k8s://`): cluster mode. The secrets go in a Secret this worker writes in the
  application's namespace before the submission and deletes after it; each reaches the driver by
  reference (`spark.kubernetes.driver.secretKeyRef.<NAME>=<secret>:<NAME>`).

In cluster mode the files the worker names (the application, its Python files, an audit file) are
shipped by spark-submit: YARN uploads them itself, Kubernetes through `spark.kubernetes.file.upload.path`
(an object store or HDFS folder the driver can read), which the Spark connection's conf must name.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from delivery_semantics.plumbing.endpoints import EndpointError, private_dir

# What an application reads that is no secret; every other variable passes by reference.
PLAIN_ENV = frozenset({"SEMANTICS_LAKEHOUSE", "SEMANTICS_SOURCE_DIALECT", "SEMANTICS_SINK_DIALECT"})
# This worker's own: meaningless where the driver runs in the cluster (its image has its Python, and
# the package comes with --py-files).
WORKER_ONLY_ENV = frozenset({"PYTHONPATH", "PYSPARK_PYTHON"})
# The name of YARN's credentials file in the driver's working directory.
APPLICATION_ENV = "SEMANTICS_APPLICATION_ENV"
APPLICATION_ENV_FILE = "semantics-application-env.json"
# Arguments of the checker that name a file on this worker, shipped in cluster mode.
FILE_ARGS = ("--audit",)
# What a Connect application reads besides the platform's environment: the server, its Python files
# and the session's settings (none of them a secret; the token is SPARK_CONNECT_AUTHENTICATE_TOKEN).
CONNECT_REMOTE = "SPARK_REMOTE"
CONNECT_PY_FILES = "SEMANTICS_PY_FILES"
CONNECT_SESSION_CONF = "SEMANTICS_SPARK_SESSION_CONF"


@dataclass(frozen=True)
class Submission:
    """What spark-submit is given: none of `args`, `conf` or `plain_env` holds a secret."""

    master: str
    deploy_mode: str
    conf: dict[str, str]
    files: list[str]
    # spark-submit's own environment: in client mode the driver's, secrets included (never on argv).
    process_env: dict[str, str]
    # Passed by the Spark provider as spark.yarn.appMasterEnv.* / spark.kubernetes.driverEnv.* confs.
    plain_env: dict[str, str]
    app_args: list[str]
    # The Kubernetes Secret to create before the submission and delete after it.
    secret: dict | None = None
    # YARN's credentials file, removed after the submission.
    credentials_file: Path | None = None

    @property
    def connect(self) -> bool:
        return self.deploy_mode == "connect"

    def arguments(self, application: str, jars: str, py_files: str) -> list[str]:
        """spark-submit's arguments, as `spark_submit.command` runs it outside Airflow."""
        if self.connect:
            raise ValueError("a Spark Connect application runs as a Python process, not through spark-submit")
        cmd = ["--master", self.master, "--deploy-mode", self.deploy_mode, "--jars", jars, "--py-files", py_files]
        if self.files:
            cmd += ["--files", ",".join(self.files)]
        for k, v in {**self.conf, **self._plain_env_conf()}.items():
            cmd += ["--conf", f"{k}={v}"]
        return [*cmd, application, *self.app_args]

    def _plain_env_conf(self) -> dict[str, str]:
        if self.master.startswith("k8s://"):
            return {f"spark.kubernetes.driverEnv.{k}": v for k, v in self.plain_env.items()}
        if self.master == "yarn":
            return {f"spark.yarn.appMasterEnv.{k}": v for k, v in self.plain_env.items()}
        return {}


@dataclass(frozen=True)
class ClusterManager:
    name: str
    prefix: str
    cluster_mode: bool
    # What the Spark connection's conf must name for this manager, and why.
    required_conf: dict[str, str] = field(default_factory=dict)

    def matches(self, master: str) -> bool:
        return master == self.prefix or master.startswith(self.prefix)

    def submission(self, master: str, env: dict[str, str], conf: dict[str, str], app_args: list[str]) -> Submission:
        missing = [f"{k} ({why})" for k, why in self.required_conf.items() if not conf.get(k)]
        if missing:
            raise EndpointError(f"a {self.name} master needs in the Spark connection's conf: {'; '.join(missing)}")
        if not self.cluster_mode:
            return Submission(master, "client", conf, [], env, {}, list(app_args))
        files, args = _shipped_files(app_args)
        plain = {k: v for k, v in env.items() if k in PLAIN_ENV}
        secrets = {k: v for k, v in env.items() if k not in PLAIN_ENV and k not in WORKER_ONLY_ENV}
        return self._by_reference(master, conf, files, plain, secrets, args)

    def _by_reference(self, master, conf, files, plain, secrets, args) -> Submission:
        raise NotImplementedError


class _Connect(ClusterManager):
    def submission(self, master: str, env: dict[str, str], conf: dict[str, str], app_args: list[str]) -> Submission:
        env = {**env, CONNECT_REMOTE: master, CONNECT_SESSION_CONF: json.dumps(conf)}
        return Submission(master, "connect", {}, [], env, {}, list(app_args))


class _Yarn(ClusterManager):
    def _by_reference(self, master, conf, files, plain, secrets, args) -> Submission:
        credentials = _private_file(secrets)
        return Submission(
            master,
            "cluster",
            conf,
            [*files, f"{credentials}#{APPLICATION_ENV_FILE}"],
            {},
            {**plain, APPLICATION_ENV: APPLICATION_ENV_FILE},
            args,
            credentials_file=credentials,
        )


class _Kubernetes(ClusterManager):
    def _by_reference(self, master, conf, files, plain, secrets, args) -> Submission:
        name = (
            "semantics-" + hashlib.sha256(json.dumps(secrets, sort_keys=True).encode() + os.urandom(8)).hexdigest()[:16]
        )
        refs = {f"spark.kubernetes.driver.secretKeyRef.{k}": f"{name}:{k}" for k in secrets}
        manifest = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": name,
                "namespace": conf.get("spark.kubernetes.namespace", "default"),
                "labels": {"app.kubernetes.io/managed-by": "delivery-semantics"},
            },
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in secrets.items()},
        }
        return Submission(master, "cluster", {**conf, **refs}, files, {}, plain, args, secret=manifest)


CLUSTER_MANAGERS: tuple[ClusterManager, ...] = (
    ClusterManager("local", "local", cluster_mode=False),
    ClusterManager("standalone", "spark://", cluster_mode=False),
    _Connect("connect", "sc://", cluster_mode=False),
    _Yarn("yarn", "yarn", cluster_mode=True),
    _Kubernetes(
        "kubernetes",
        "k8s://",
        cluster_mode=True,
        required_conf={
            "spark.kubernetes.file.upload.path": "where spark-submit puts the application's files for the driver",
            "spark.kubernetes.container.image": "a Spark image with Python and the package's requirements",
        },
    ),
)


def cluster_manager(master: str) -> ClusterManager:
    """The manager a master URL names; a master that names none, or that the Spark provider would
    take for another (it tests `yarn` and `k8s` as substrings), is refused in one line."""
    found = [m for m in CLUSTER_MANAGERS if m.matches(master)]
    lowered = master.lower()
    ambiguous = [w for w in ("yarn", "k8s") if w in lowered and not (found and found[0].name in ("yarn", "kubernetes"))]
    if not found or ambiguous:
        raise EndpointError(
            f"Spark master {master[:80]!r}: not local[...], spark://HOST:PORT, sc://HOST:PORT, yarn or k8s://URL"
            + (f" (the Spark provider would take it for {ambiguous[0]})" if ambiguous else "")
        )
    return found[0]


def _shipped_files(app_args: list[str]) -> tuple[list[str], list[str]]:
    """The files the checker's arguments name on this worker, shipped with --files, and the arguments
    naming them as the driver finds them: by name, in its working directory."""
    files, args = [], list(app_args)
    for i, a in enumerate(args[:-1]):
        if a in FILE_ARGS:
            path = Path(args[i + 1])
            files.append(str(path.resolve()))
            args[i + 1] = path.name
    return files, args


def _private_file(values: dict[str, str]) -> Path:
    """The secrets as a new JSON file only this user reads, in the private folder (never followed
    through a link, never an existing file)."""
    path = private_dir("spark-env") / f"application-env-{os.urandom(8).hex()}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(values, f)
    return path


@contextmanager
def submitted(sub: Submission, kubernetes_conn_id: str = "kubernetes_default"):
    """While the application is submitted and runs: its Kubernetes Secret exists (created through
    the cncf.kubernetes provider's connection, or the kubernetes client's own configuration), and
    after it neither the Secret nor YARN's credentials file is left."""
    core = namespace = None
    try:
        if sub.secret is not None:
            core = _kubernetes_core(kubernetes_conn_id)
            namespace = sub.secret["metadata"]["namespace"]
            core.create_namespaced_secret(namespace, sub.secret)
        yield sub
    finally:
        if core is not None:
            name = sub.secret["metadata"]["name"]
            try:
                core.delete_namespaced_secret(name, namespace)
            except Exception as e:  # the label names what the platform made, for an operator to sweep
                logging.getLogger(__name__).warning("Secret %s/%s not deleted: %s", namespace, name, type(e).__name__)
        if sub.credentials_file is not None:
            sub.credentials_file.unlink(missing_ok=True)


def _kubernetes_core(conn_id: str):
    try:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        return KubernetesHook(conn_id=conn_id).core_v1_client
    except ImportError:
        pass
    try:
        from kubernetes import client, config
    except ImportError:
        raise EndpointError(
            "a k8s:// master needs apache-airflow-providers-cncf-kubernetes (or the kubernetes client) "
            "to write the application's Secret"
        ) from None
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return client.CoreV1Api()


def session_setting(key: str) -> bool:
    """Whether a Spark setting is a session's own, which a Connect client may set: SQL's and Delta's
    runtime settings, not the server's static ones (its extensions, catalogs, JVMs, jars)."""
    if key == "spark.sql.extensions" or key.startswith("spark.sql.catalog."):
        return False
    return key.startswith(("spark.sql.", "spark.databricks.delta."))


_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")


def load_application_env() -> None:
    """In the driver: the credentials file YARN shipped into the working directory, into the
    environment (a no-op anywhere else)."""
    name = os.environ.get(APPLICATION_ENV)
    if not name or not Path(name).is_file():
        return
    values = json.loads(Path(name).read_text())
    os.environ.update({k: str(v) for k, v in values.items() if _ENV_NAME.fullmatch(k)})
