#!/usr/bin/env bash
# The test command: installs what the tests need (Python packages, a PostgreSQL
# server, Node packages including the Codex and Claude Code CLIs, buf), runs the static checks (including
# hadolint on the Dockerfile), then the whole suite.
# Works on a fresh machine; `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

python3 -m pip install --quiet --disable-pip-version-check -e ".[server,dev]"
bash scripts/setup-tmux.sh
eval "$(bash scripts/setup-chromium.sh)"
export M3_CHROMIUM

M3_TEST_POSTGRES_URL="$(bash scripts/start-postgres.sh)"
export M3_TEST_POSTGRES_URL
eval "$(bash scripts/setup-node.sh)"
eval "$(bash scripts/setup-typescript.sh)"
eval "$(bash scripts/setup-codex.sh)"
export M3_CODEX_BIN
eval "$(bash scripts/setup-claude-code.sh)"
export M3_CLAUDE_CODE_BIN
(cd clients/go && go mod download)

echo "== proto: buf lint, buf breaking, generated-code drift"
BUF="$(bash scripts/install-buf.sh)"
export BUF
bash scripts/check-proto.sh

echo "== ruff, mypy"
ruff check .
ruff format --check .
mypy

echo "== container: hadolint (Dockerfile), shellcheck (docker/entrypoint.sh)"
bash scripts/lint-container.sh

echo "== typescript client: typecheck, unit tests"
npm --prefix clients/typescript run --silent typecheck
npm --prefix clients/typescript test

echo "== go client: vet, gofmt, test"
(cd clients/go && go vet ./... && test -z "$(gofmt -l .)" && go test ./...)

echo "== bench: bench/compare.py --smoke (M3 next to LangGraph and DBOS, tiny counts; no timing checked)"
smoke_json=$(mktemp --suffix=.json)
python3 bench/compare.py --smoke --json "$smoke_json"
echo "== bench: bench/compare_runs.py on that run (the targets' figures run by run)"
python3 bench/compare_runs.py "$smoke_json"
rm -f "$smoke_json"
echo "== bench: bench/http_transport.py, tiny counts (CPU per HTTP exchange; no timing checked)"
python3 bench/http_transport.py --exchanges 64 --runs 1
echo "== bench: bench/commits_per_round.py, one execution a generation (fails when it counts no commit)"
python3 bench/commits_per_round.py --executions 1
echo "== bench: bench/load_respond.py --smoke (concurrent Respond calls and watchers; fails on an untyped error)"
python3 bench/load_respond.py --smoke

# Last, so that its summary line closes the run. In parallel (pytest-xdist): the tests
# mostly wait on subprocesses and I/O, so more workers than cores pay off. --dist loadfile
# keeps a file's tests (and its module-scoped servers) on one worker; files go out in the
# order tests/conftest.py sets (the long ones first). M3_TEST_WORKERS=0 runs it in this
# process alone.
echo "== pytest"
python3 -m pytest -q -p no:cacheprovider -n "${M3_TEST_WORKERS:-3}" --dist loadfile \
  --no-loadscope-reorder --durations=25 -m "not serial" "$@"
# Then the few tests marked `serial` (see pyproject's markers), alone; exit status 5
# (none selected, e.g. with a path in "$@" that has none) is not a failure.
echo "== pytest: the serial tests"
python3 -m pytest -q -p no:cacheprovider -m serial "$@" || [ $? -eq 5 ]
