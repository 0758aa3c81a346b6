"""The platform's plumbing: where every endpoint is (Airflow connections), what the DAGs' tasks do, the Spark submission, topic administration, and the command line."""
