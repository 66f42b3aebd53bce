"""gRPC API layer of M3: servicers, status mapping, proto <-> model conversion."""
