"""The PostgreSQL backend's public face: import it explicitly (it imports psycopg, the ``postgres``
extra); ``journal.open_journal("postgresql://…")`` opens it for you.
"""

from journal._postgres import MIGRATIONS, SCHEMA_VERSION, PostgresJournal, redact_dsn

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "PostgresJournal", "redact_dsn"]
