"""What people read: the text and HTML reports, the Airflow UI page, and a long command's progress."""
