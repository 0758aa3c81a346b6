"""The top floor: what a user runs, over everything below it."""
