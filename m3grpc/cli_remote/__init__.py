"""`m3grpc` verbs over the gRPC API: submit, status, result, cancel, pending,
respond, watch, rounds list|get.

Built on the Python remote client (m3grpc.client) and the wire and model layers
only, so they work with the light install (`pip install m3grpc`, no server
extra). `add_commands` (argparse only) registers them with `m3grpc`'s parser;
a verb loads the client when it runs.
"""

from m3grpc.cli_remote.parser import add_commands

__all__ = ["add_commands"]
