#!/usr/bin/env bash
# Install a pinned buf CLI into .tools/ (gitignored) from the npm package
# @bufbuild/buf, which ships the native binary in a per-platform package
# (@bufbuild/buf-linux-x64, ...). Nothing is downloaded outside the npm registry.
#
# Usage: bash scripts/install-buf.sh        # idempotent; prints the buf path
# Result: .tools/bin/buf  (scripts/gen-proto.sh and check-proto.sh use it)
set -euo pipefail

BUF_VERSION="1.75.0"

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${ROOT}/.tools"
BIN="${TOOLS}/bin/buf"

if [[ -x "${BIN}" ]] && [[ "$("${BIN}" --version 2>/dev/null)" == "${BUF_VERSION}" ]]; then
  echo "${BIN}"
  exit 0
fi

command -v npm >/dev/null || { echo "install-buf: npm is required" >&2; exit 1; }

PREFIX="${TOOLS}/buf-npm"
rm -rf "${PREFIX}"
mkdir -p "${PREFIX}" "${TOOLS}/bin"
# --ignore-scripts: the package's postinstall only re-links the binary; we link it ourselves.
npm install --prefix "${PREFIX}" --no-save --no-audit --no-fund --no-package-lock \
  --ignore-scripts --loglevel=error "@bufbuild/buf@${BUF_VERSION}" >&2

# Pick the native binary of this platform's optional dependency.
native=""
for candidate in "${PREFIX}"/node_modules/@bufbuild/buf-*/bin/buf; do
  if [[ -x "${candidate}" ]]; then native="${candidate}"; break; fi
done
if [[ -z "${native}" ]]; then
  echo "install-buf: no native buf binary for this platform in @bufbuild/buf@${BUF_VERSION}" >&2
  exit 1
fi
ln -sfn "../${native#"${TOOLS}/"}" "${BIN}"

got="$("${BIN}" --version)"
if [[ "${got}" != "${BUF_VERSION}" ]]; then
  echo "install-buf: expected buf ${BUF_VERSION}, got ${got}" >&2
  exit 1
fi
echo "${BIN}"
