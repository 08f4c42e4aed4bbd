"""A fresh PostgreSQL database per test, on the server named by ``$EVO_TEST_PG`` (.ci/run starts
one on loopback with .ci/postgres.sh); tests that need one skip without it or without psycopg."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url


def server_url() -> str:
    url = os.environ.get("EVO_TEST_PG")
    if not url:
        pytest.skip("no PostgreSQL server: set EVO_TEST_PG to a superuser URL (.ci/postgres.sh starts one)")
    try:
        import psycopg  # noqa: F401
    except ImportError:
        pytest.skip("psycopg is not installed (pip install 'evo-kernels[postgres]')")
    return url


@pytest.fixture
def pg_url() -> Iterator[str]:
    """The URL of a new, empty database, dropped after the test."""
    server = make_url(server_url())
    name = f"evo_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()
