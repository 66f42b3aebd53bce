#!/usr/bin/env bash
# Check the M3 wire contract:
#   1. buf lint (STANDARD + COMMENTS) and buf format (no diff);
#   2. buf breaking (FILE) against the committed baseline image;
#   3. the committed generated Python code matches the protos (drift check);
#   4. the committed TypeScript and Go client code matches buf.gen.yaml's output.
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

GEN_DIR="m3grpc/api/gen"
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

echo "== generated code drift (${GEN_DIR})"
SNAPSHOT="$(mktemp -d)"
trap 'rm -rf "${SNAPSHOT}"' EXIT
if [[ -d "${GEN_DIR}" ]]; then
  cp -R "${GEN_DIR}" "${SNAPSHOT}/before"
else
  mkdir -p "${SNAPSHOT}/before"
fi
bash scripts/gen-proto.sh >/dev/null
# Working tree vs. generator output (works before and after a commit).
if ! diff -r -x __pycache__ "${SNAPSHOT}/before" "${GEN_DIR}"; then
  echo "check-proto: ${GEN_DIR} was stale; it is regenerated now: review and commit it" >&2
  status=1
fi
# Committed tree vs. working tree, once the generated code is tracked (CI runs
# in a fresh clone, so any difference there is a drift).
if git rev-parse --verify -q HEAD >/dev/null && [[ -n "$(git ls-files -- "${GEN_DIR}")" ]]; then
  if ! git diff --exit-code --stat -- "${GEN_DIR}" proto; then
    echo "check-proto: uncommitted changes in ${GEN_DIR} or proto/" >&2
    status=1
  fi
  untracked="$(git ls-files --others --exclude-standard -- "${GEN_DIR}" proto)"
  if [[ -n "${untracked}" ]]; then
    echo "check-proto: untracked files in ${GEN_DIR} or proto/:" >&2
    echo "${untracked}" >&2
    status=1
  fi
else
  echo "(${GEN_DIR} is not committed yet: git drift check skipped)"
fi

echo "== generated client drift (clients/typescript/src/gen, clients/go/gen)"
CLIENT_GEN=(clients/typescript/src/gen clients/go/gen)
bash scripts/gen-clients.sh >/dev/null
if [[ -n "$(git status --porcelain -- "${CLIENT_GEN[@]}")" ]]; then
  git status --porcelain -- "${CLIENT_GEN[@]}" >&2
  echo "check-proto: generated client code differs from the committed code: regenerate and commit" >&2
  status=1
fi

if [[ ${status} -ne 0 ]]; then
  echo "check-proto: FAILED" >&2
  exit 1
fi
echo "check-proto: OK"
