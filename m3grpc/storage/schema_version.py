"""Which schema revision a database holds, read with plain SQL (no Alembic import).

The revisions themselves are Alembic migrations in `m3grpc/storage/migrations`;
`m3grpc db upgrade` runs them (m3grpc/storage/migrate.py). Opening a store only
needs to know where the database stands, and that must stay cheap: every store
(and every test) opens one. A test keeps `REVISIONS` equal to the migration chain.

States:
- empty: no M3 table and no version table; a store creates the head schema and
  stamps it (the same schema the migrations produce, which a test checks).
- unversioned: M3 tables from before migrations existed, no version row; adopted
  (stamped) when its tables match the head schema, refused otherwise.
- behind: a known, older revision; refused until `m3grpc db upgrade`.
- current: the head revision.
- ahead: a revision this version does not know (written by a newer M3); refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from m3grpc.storage.schema import metadata

# Alembic's version table, under a name of our own so that M3 can share a
# database with another application that uses Alembic.
VERSION_TABLE = "m3_schema_version"
# Every revision in order, oldest first; the last one is the head.
REVISIONS: tuple[str, ...] = ("0001", "0002", "0003", "0004")
HEAD_REVISION = REVISIONS[-1]

_version = sa.Table(
    VERSION_TABLE,
    sa.MetaData(),
    # As Alembic creates it, so that `alembic` and M3 read and write the same table.
    sa.Column("version_num", sa.String(32), nullable=False),
    sa.PrimaryKeyConstraint("version_num", name=f"{VERSION_TABLE}_pkc"),
)


class SchemaState(StrEnum):
    EMPTY = "empty"
    UNVERSIONED = "unversioned"
    BEHIND = "behind"
    CURRENT = "current"
    AHEAD = "ahead"


class SchemaVersionError(RuntimeError):
    """The database's schema is not the one this version of M3 runs on.

    The message is one line for the operator and says what to do.
    """


@dataclass(frozen=True)
class SchemaStatus:
    state: SchemaState
    revision: str | None  # the stamped revision, None when there is none
    head: str

    def describe(self) -> str:
        """One line: where the schema stands, and what to do about it if anything."""
        match self.state:
            case SchemaState.EMPTY:
                return f"schema empty (revision {self.head} is created on first start)"
            case SchemaState.CURRENT:
                return f"schema at revision {self.revision} (current)"
            case SchemaState.UNVERSIONED:
                return (
                    "schema unversioned: M3 tables from before migrations, "
                    f"adopted as revision {self.head} if they match it"
                )
            case SchemaState.BEHIND:
                return (
                    f"schema at revision {self.revision}, behind {self.head}: "
                    "run `m3grpc db upgrade` before serving"
                )
            case SchemaState.AHEAD:
                return (
                    f"schema at revision {self.revision}, unknown to this version of M3 "
                    f"(head {self.head}): a newer M3 wrote it; run that version"
                )
        raise AssertionError(self.state)  # pragma: no cover - every state is matched

    @property
    def servable(self) -> bool:
        """Whether a store may open the database as it is (creating or adopting it)."""
        return self.state in (SchemaState.EMPTY, SchemaState.UNVERSIONED, SchemaState.CURRENT)


def read_schema_status(conn: Connection, revisions: Sequence[str] = REVISIONS) -> SchemaStatus:
    """Where the database on `conn` stands, without changing anything.

    `revisions`: the known revisions, oldest first (tests name a longer history).
    """
    names = set(sa.inspect(conn).get_table_names())
    has_m3_tables = bool(names & set(metadata.tables))
    revision = None
    if VERSION_TABLE in names:
        rows = conn.execute(sa.select(_version.c.version_num)).scalars().all()
        # Alembic keeps one row per head; M3's history is linear, so at most one.
        revision = rows[0] if rows else None
    if revision is None:
        state = SchemaState.UNVERSIONED if has_m3_tables else SchemaState.EMPTY
    elif revision == revisions[-1]:
        state = SchemaState.CURRENT
    elif revision in revisions:
        state = SchemaState.BEHIND
    else:
        state = SchemaState.AHEAD
    return SchemaStatus(state, revision, revisions[-1])


def stamp(conn: Connection, revision: str = HEAD_REVISION) -> None:
    """Record `revision` (the head by default) as the database's schema version."""
    _version.create(conn, checkfirst=True)
    conn.execute(sa.delete(_version))
    conn.execute(sa.insert(_version).values(version_num=revision))
