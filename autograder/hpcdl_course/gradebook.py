"""Where the gradebook is, and how several nbgrader processes write it at once.

GRADEBOOK_URL (an SQLAlchemy URL, e.g. postgresql://grader@db.example.org/hpcdl) names a database server;
without it the gradebook is <work>/gradebook.db (SQLite). nbgrader_config.py gives nbgrader the same URL.

Submissions graded in parallel are each autograded by an nbgrader process of their own, all writing the one
gradebook through nbgrader's own code. A database server takes concurrent writers as it is. SQLite lets one
writer in at a time, and Python's sqlite3 driver waits only 5 s for the lock and begins a transaction only at
its first write, so a read of nbgrader's and the write that follows from it are not one transaction. So every
SQLite transaction of the course's processes and nbgrader's begins as a writer (BEGIN IMMEDIATE, SQLAlchemy's
recipe for this driver) and waits up to BUSY_SECONDS for the one before it: nbgrader's transactions last
milliseconds, so the gradebook's writes are serialized and the gradings are not.
"""
import os
import sqlite3

from . import paths

BUSY_SECONDS = 600


def url() -> str:
    return os.environ.get("GRADEBOOK_URL") or f"sqlite:///{paths.work() / 'gradebook.db'}"


def shown_url() -> str:
    """The gradebook's place for printing: the SQLite file, or the server's URL without its password."""
    from sqlalchemy.engine import make_url

    where = make_url(url())
    return where.database if where.get_backend_name() == "sqlite" else where.render_as_string(hide_password=True)


def open_gradebook():
    """nbgrader's Gradebook on this course's database (a context manager)."""
    from nbgrader.api import Gradebook

    serialize_sqlite_transactions()
    return Gradebook(url())


_installed = False


def serialize_sqlite_transactions() -> None:
    """In this process, every SQLite transaction that SQLAlchemy begins takes the write lock first,
    waiting for it (see the module's note). Other databases are left alone. Idempotent."""
    global _installed
    if _installed:
        return
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    @event.listens_for(Engine, "connect")
    def _connect(dbapi_connection, _record):
        if isinstance(dbapi_connection, sqlite3.Connection):
            dbapi_connection.isolation_level = None  # SQLAlchemy's "begin" below says when a transaction starts
            dbapi_connection.execute(f"PRAGMA busy_timeout = {BUSY_SECONDS * 1000}")

    @event.listens_for(Engine, "begin")
    def _begin(connection):
        if connection.dialect.name == "sqlite":
            connection.exec_driver_sql("BEGIN IMMEDIATE")

    _installed = True
