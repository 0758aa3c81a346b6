"""The package's Airflow provider (the `apache_airflow_provider` entry point): the UI plugin, the
`[semantics]` configuration section with every setting, and the connection types the platform's
files may name, by role (docs/DEPLOY.md)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from delivery_semantics import locations, teams
from delivery_semantics.audit.audits import NOTIFIERS

DISTRIBUTION = "delivery-semantics"


def _version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # a checkout run from its folders
        return "0+checkout"


def get_provider_info() -> dict:
    options = {
        name: {
            # No Airflow default: unset, the platform's own applies (named here, docs/SETTINGS.md).
            "description": f"{what} (default: {default})",
            "version_added": None,
            "type": "string",
            "example": None,
            "default": None,
        }
        for name, (what, default) in locations.OPTIONS.items()
    }
    return {
        "package-name": DISTRIBUTION,
        "name": "Delivery semantics",
        "description": "Checks that Kafka pipelines deliver at-most-once, at-least-once or exactly-once.",
        "versions": [_version()],
        "plugins": [
            {
                "name": "delivery_semantics",
                "plugin-class": "delivery_semantics.entry.airflow_plugin.DeliverySemanticsPlugin",
            }
        ],
        "config": {
            "semantics": {
                "description": "The delivery-semantics platform's settings; SEMANTICS_<NAME> in the environment "
                "takes precedence over each.",
                "options": options,
            }
        },
        # Not Airflow's schema: the connection types a team's files may name, by role (teams.ROLE_TYPES),
        # for an operator writing SEMANTICS_TEAMS.
        "connection-roles": {role: list(types) for role, types in teams.ROLE_TYPES.items()},
        # Nor this: the notifiers an audit file's alerts may name, each another provider's class.
        "audit-notifiers": {
            notifier: {"notifier-class": f"{module}.{cls}", "provider": provider}
            for notifier, (module, cls, provider) in NOTIFIERS.items()
        },
    }
