"""Generated gRPC/protobuf code of the M3 wire contract. Do not edit: run scripts/gen-proto.sh."""
