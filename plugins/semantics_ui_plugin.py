"""The platform's Airflow plugin for an Airflow that loads this repository's plugins/ folder; an
installed package registers the same class through its provider entry point instead."""

from delivery_semantics.entry.airflow_plugin import DeliverySemanticsPlugin

__all__ = ["DeliverySemanticsPlugin"]
