"""The bottom floor: what an event is, and how it is named, for every layer that writes, records
or reads one (the generator, the ledger, the consumers, the checker)."""
