"""The history, Jepsen's: the PostgreSQL ledger every event is written to before it is produced, and the versioned schema it lives in."""
