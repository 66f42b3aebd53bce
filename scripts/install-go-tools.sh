#!/usr/bin/env bash
# Install the pinned Go protobuf plugins into .tools/bin (gitignored) with
# `go install`. The versions are pinned once, as `tool` dependencies of
# clients/go/go.mod (checksums in clients/go/go.sum), so the plugins always
# match the google.golang.org/protobuf and grpc runtime the generated code
# is compiled against:
#   protoc-gen-go       google.golang.org/protobuf/cmd/protoc-gen-go
#   protoc-gen-go-grpc  google.golang.org/grpc/cmd/protoc-gen-go-grpc
# Modules come from the Go module proxy (or the module cache after
# `go mod download`). buf.gen.yaml uses them as local plugins.
#
# Usage: bash scripts/install-go-tools.sh   # idempotent; prints the bin dir
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${ROOT}/.tools/bin"
MODULE="${ROOT}/clients/go"

command -v go >/dev/null || { echo "install-go-tools: go is required" >&2; exit 1; }

# "<module>@<version>" pinned by clients/go/go.mod for each plugin.
pinned() {
  (cd "${MODULE}" && go list -m -f '{{.Path}}@{{.Version}}' "$1")
}
# "<module>@<version>" the installed binary was built from ("" when absent).
built() {
  [[ -x "${BIN}/$1" ]] || return 0
  go version -m "${BIN}/$1" 2>/dev/null | awk '$1 == "mod" { print $2 "@" $3 }'
}

want_go="$(pinned google.golang.org/protobuf)"
want_grpc="$(pinned google.golang.org/grpc/cmd/protoc-gen-go-grpc)"
if [[ "$(built protoc-gen-go)" != "${want_go}" ]] \
  || [[ "$(built protoc-gen-go-grpc)" != "${want_grpc}" ]]; then
  mkdir -p "${BIN}"
  # `go install tool` builds every tool dependency of the module at its pinned version.
  (cd "${MODULE}" && GOBIN="${BIN}" go install tool)
  for plugin in protoc-gen-go protoc-gen-go-grpc; do
    [[ -x "${BIN}/${plugin}" ]] || { echo "install-go-tools: ${plugin} was not installed" >&2; exit 1; }
  done
  if [[ "$(built protoc-gen-go)" != "${want_go}" ]] \
    || [[ "$(built protoc-gen-go-grpc)" != "${want_grpc}" ]]; then
    echo "install-go-tools: installed plugins do not match ${want_go}, ${want_grpc}" >&2
    exit 1
  fi
fi
echo "${BIN}"
