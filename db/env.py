"""Alembic environment for evo's tables (``evo_*``, version table ``evo_alembic_version``).

evo runs ``upgrade head`` itself when it opens a database (evo.store.engine), handing the
connection over in ``config.attributes["connection"]``. From a shell, use
``alembic -c db/alembic.ini ...`` (``-x url=...`` or ``$EVO_DB`` picks the database). Optuna's
tables live in the same database: autogenerate ignores every table that is not evo's.
"""

from __future__ import annotations

from typing import Any

from alembic import context

from evo import paths
from evo.store.engine import WRITE, make_engine
from evo.store.models import PREFIX, VERSION_TABLE, Base

config = context.config
target_metadata = Base.metadata


def include_object(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    """Only evo's tables take part in autogenerate (Optuna's are not ours to migrate)."""
    if type_ == "table":
        return bool(name) and name.startswith(PREFIX)
    return True


def run(connection: Any) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        version_table=VERSION_TABLE,
        include_object=include_object,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    run(connection)
else:
    url = context.get_x_argument(as_dictionary=True).get("url") or paths.default_db_url()
    engine = make_engine(url)
    with engine.connect().execution_options(**WRITE) as conn:
        run(conn)
    engine.dispose()
