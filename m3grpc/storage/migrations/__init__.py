"""Alembic migrations of the M3 schema, shipped in the package.

`m3grpc db upgrade` runs them (m3grpc/storage/migrate.py configures Alembic in
code: there is no alembic.ini). A new revision goes in `versions/`, and its ID
is appended to `REVISIONS` in m3grpc/storage/schema_version.py; a test keeps
the two, and the head schema against m3grpc/storage/schema.py, in step.
"""
