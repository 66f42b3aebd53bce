#!/usr/bin/env bash
# Regenerate the Python code of the M3 wire contract into m3grpc/api/gen/.
#
#   proto/m3/v1/*.proto  ->  m3grpc/api/gen/m3/v1/{x_pb2.py, x_pb2.pyi, x_pb2_grpc.py}
#
# Uses grpc_tools.protoc (grpcio-tools, pinned in pyproject's dev extra), which
# bundles protoc, its Python/.pyi generators, the gRPC Python generator and the
# google/protobuf well-known types. protoc emits absolute imports
# (`from m3.v1 import x_pb2`); they are rewritten to
# `from m3grpc.api.gen.m3.v1 import x_pb2` so the code lives inside the package.
#
# Deterministic: it regenerates into a scratch directory and replaces the
# output tree whole, so a second run produces no diff.
#
# Usage: bash scripts/gen-proto.sh [OUT_DIR]
#   OUT_DIR defaults to m3grpc/api/gen; a relative OUT_DIR is relative to the
#   repository root. OUT_DIR is replaced whole.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"

PYTHON="${PYTHON:-python3}"
OUT="${1:-m3grpc/api/gen}"
PROTO_ROOT="proto"
PKG_DIR="m3/v1"

case "${OUT}" in
  "" | "/" | "." | "..") echo "gen-proto: refusing output directory '${OUT}'" >&2; exit 2 ;;
esac
PY_PREFIX="m3grpc.api.gen"

WKT_INCLUDE="$("${PYTHON}" -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')"

SCRATCH="$(mktemp -d)"
trap 'rm -rf "${SCRATCH}"' EXIT

# Sorted, repository-relative inputs: stable order, stable output.
mapfile -t PROTOS < <(cd "${PROTO_ROOT}" && find "${PKG_DIR}" -name '*.proto' | LC_ALL=C sort)
if [[ ${#PROTOS[@]} -eq 0 ]]; then
  echo "gen-proto: no .proto files under ${PROTO_ROOT}/${PKG_DIR}" >&2
  exit 1
fi

(
  cd "${PROTO_ROOT}"
  "${PYTHON}" -m grpc_tools.protoc \
    -I . \
    -I "${WKT_INCLUDE}" \
    --python_out="${SCRATCH}" \
    --pyi_out="${SCRATCH}" \
    --grpc_python_out="${SCRATCH}" \
    "${PROTOS[@]}"
)

# Rewrite imports of our own generated modules to the package path. Only
# `m3.v1` modules are touched; google.protobuf imports stay as they are.
find "${SCRATCH}" -type f \( -name '*.py' -o -name '*.pyi' \) -print0 |
  LC_ALL=C xargs -0 sed -i -E \
    -e "s/^from m3\.v1 import /from ${PY_PREFIX}.m3.v1 import /" \
    -e "s/^import m3\.v1\./import ${PY_PREFIX}.m3.v1./"

# grpc_tools writes a *_pb2_grpc.py for every file; keep only those of files
# that define a service.
for f in "${SCRATCH}/${PKG_DIR}"/*_pb2_grpc.py; do
  grep -qE '^class [A-Za-z0-9_]+Stub\b' "${f}" || rm -f "${f}"
done

# Package markers, so `m3grpc.api.gen.m3.v1.x_pb2` imports as a regular package.
write_init() {
  printf '"""%s"""\n' "$2" >"$1/__init__.py"
}
write_init "${SCRATCH}" "Generated gRPC/protobuf code of the M3 wire contract. Do not edit: run scripts/gen-proto.sh."
write_init "${SCRATCH}/m3" "Generated code of the m3 proto package. Do not edit."
write_init "${SCRATCH}/m3/v1" "Generated code of the m3.v1 proto package. Do not edit."

# Fail loudly if an absolute m3.v1 import survived the rewrite.
if grep -rEn '^(from m3\.v1 |import m3\.v1)' "${SCRATCH}" >&2; then
  echo "gen-proto: unrewritten m3.v1 imports remain" >&2
  exit 1
fi

rm -rf "${OUT}"
mkdir -p "$(dirname "${OUT}")"
cp -R "${SCRATCH}" "${OUT}"
chmod -R u+rwX,go+rX "${OUT}"
find "${OUT}" -type f -exec chmod 0644 {} +
echo "gen-proto: wrote ${OUT}"
