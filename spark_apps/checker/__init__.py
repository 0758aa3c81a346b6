"""The Spark checker: reads a topic (or a sink) and a ledger, classifies every event id with one
function per anomaly kind, and writes the verdicts. spark_apps/reconcile.py is its entry point."""
