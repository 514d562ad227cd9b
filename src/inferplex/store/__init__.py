"""Persistent state: the database, its tables and migrations, and the stores built on them.

Keys, accounts, the credit ledger and the usage log live in one SQL database (SQLite by default,
PostgreSQL through a URL). Each store is a small class over the `Database` interface (backend.py), which
each engine implements in a module of its own (sqlite.py, postgres.py), with one contract test suite run
against both.
"""
