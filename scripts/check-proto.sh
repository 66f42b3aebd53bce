#!/usr/bin/env bash
# Check the M3 wire contract:
#   1. buf lint (STANDARD + COMMENTS) and buf format (no diff);
#   2. buf breaking (FILE) against the committed baseline image;
#   3. the committed generated code of every language (Python, TypeScript, Go)
#      is what scripts/gen-proto.sh produces from the protos (drift check).
#
# Usage: bash scripts/check-proto.sh
#
# The baseline image proto/baseline/m3.v1.binpb is the last released contract.
# Update it only on purpose, when a breaking change is accepted or a release
# is cut:
#   .tools/bin/buf build --exclude-source-info -o proto/baseline/m3.v1.binpb
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${ROOT}"

GEN_DIRS=(m3grpc/wire/gen clients/typescript/src/gen clients/go/gen)
BASELINE="proto/baseline/m3.v1.binpb"

BUF="$(bash scripts/install-buf.sh)"
status=0

echo "== buf lint"
"${BUF}" lint || status=1

echo "== buf format"
"${BUF}" format --diff --exit-code || status=1

echo "== buf breaking (FILE) against ${BASELINE}"
if [[ ! -f "${BASELINE}" ]]; then
  echo "check-proto: missing baseline image ${BASELINE}" >&2
  status=1
else
  "${BUF}" breaking --against "${BASELINE}" || status=1
fi

echo "== generated code drift (${GEN_DIRS[*]})"
# Regenerate, then compare with the committed tree: CI runs in a fresh clone,
# so any difference (or new file) is drift. Before the first commit of the
# generated code, compare with the working tree instead.
SNAPSHOT="$(mktemp -d)"
trap 'rm -rf "${SNAPSHOT}"' EXIT
for dir in "${GEN_DIRS[@]}"; do
  mkdir -p "${SNAPSHOT}/${dir}"
  if [[ -d "${dir}" ]]; then cp -R "${dir}/." "${SNAPSHOT}/${dir}"; fi
done
bash scripts/gen-proto.sh 2>/dev/null
for dir in "${GEN_DIRS[@]}"; do
  if ! diff -r -q -x __pycache__ "${SNAPSHOT}/${dir}" "${dir}"; then
    echo "check-proto: ${dir} was stale; it is regenerated now: review and commit it" >&2
    status=1
  fi
done
if git rev-parse --verify -q HEAD >/dev/null && [[ -n "$(git ls-files -- "${GEN_DIRS[@]}")" ]]; then
  if [[ -n "$(git status --porcelain -- "${GEN_DIRS[@]}" proto)" ]]; then
    git status --porcelain -- "${GEN_DIRS[@]}" proto >&2
    echo "check-proto: generated code or protos differ from the committed ones" >&2
    status=1
  fi
fi

if [[ ${status} -ne 0 ]]; then
  echo "check-proto: FAILED" >&2
  exit 1
fi
echo "check-proto: OK"
