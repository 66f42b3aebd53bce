"""Operator commands of the `m3grpc` CLI: `db upgrade|status`, `check-config`, `health`.

`commands.register` adds them to the CLI's parser; each command imports what it
needs when it runs, so `m3grpc --help` stays fast.
"""
