"""The store's sessions: one engine, read sessions, and write transactions that are all or nothing.

Every part of the repository (:mod:`evo.store.runs`, :mod:`evo.store.candidates`,
:mod:`evo.store.links`, :mod:`evo.store.evaluations`, :mod:`evo.store.insights`) builds on
:class:`StoreBase`, so that each write is one transaction taken the same way (serialized:
:data:`evo.store.engine.WRITE`) and a failed write is one line, never a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Self

from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from evo.errors import EvoError
from evo.store.engine import WRITE, describe


class StoreBase:
    """An open lineage database: its engine, its URL and its two kinds of session."""

    def __init__(self, engine: Engine, url: str) -> None:
        self.engine, self.url = engine, url
        self._read = sessionmaker(engine, expire_on_commit=False)
        self._write = sessionmaker(engine.execution_options(**WRITE), expire_on_commit=False)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[Session]:
        """One write transaction: committed when the block ends, rolled back on any error."""
        try:
            with self._write() as s, s.begin():
                yield s
        except OperationalError as exc:
            raise EvoError(f"database write failed: {describe(exc)}") from None
