"""The Airflow UI page: the latest delivery-semantics matrix, with a page per run.

A FastAPI app mounted by Airflow's api-server at /semantics, and an external view in the nav
that embeds it. Airflow does not protect plugin routes by itself, so every route depends on
Airflow's own `get_user`: without a valid Airflow JWT (the UI's `_token` cookie or a bearer
token) the request is refused with 401.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from delivery_semantics.reporting.report import UI_PREFIX as PREFIX
from delivery_semantics.reporting.ui import app


class DeliverySemanticsPlugin(AirflowPlugin):
    name = "delivery_semantics"
    fastapi_apps = [{"app": app, "url_prefix": PREFIX, "name": "Delivery semantics"}]
    external_views = [
        {
            "name": "Delivery semantics",
            "href": f"{PREFIX}/",
            "url_route": "delivery-semantics",
            "destination": "nav",
            "category": "browse",
        }
    ]
