"""`python -m m3grpc ...` is the `m3grpc` command."""

from m3grpc.cli import main

raise SystemExit(main())
