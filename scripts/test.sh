#!/usr/bin/env bash
# The test command. On a fresh Debian/Ubuntu machine it installs what the tests need
# and runs every check: the project's own virtual environment (.venv, made with the
# python3 first on PATH, like the README's run command; everything below runs through
# it), the system packages (tmux, Chromium, PostgreSQL's server, and python3-venv for a
# Debian python3), a PostgreSQL server of its own, the Node packages (the Codex and
# Claude Code CLIs among them), buf; then the static checks (buf, ruff, mypy, hadolint,
# the docs site in strict mode), the clients' own tests, the benchmarks' smoke runs, and
# the whole suite.
#
# System packages are installed as root, or through `sudo -n`; when it can do neither it
# stops at once with one line naming the missing packages and the command that installs
# them. It needs: python3 >= 3.11, Node.js >= 20 with npm, Go >= 1.26, and apt-get (or
# those packages already installed). `.ci/run` calls exactly this; extra arguments go to
# pytest (`bash scripts/test.sh tests/storage -k recovery`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# shellcheck source=SCRIPTDIR/lib/system-packages.sh
source scripts/lib/system-packages.sh

fail() {
  echo "scripts/test.sh: $*" >&2
  exit 1
}

echo "== machine: python3, node, npm, go; system packages"
command -v python3 >/dev/null || fail "needs python3 (>= 3.11) on PATH"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || fail "needs Python >= 3.11; python3 on PATH is $(python3 --version 2>&1)"
for tool in node npm go; do
  command -v "$tool" >/dev/null || fail "needs Node.js >= 20 with npm and Go >= 1.26 on PATH; '$tool' is missing"
done
read -r -a packages <<<"$(missing_test_packages)"
# A venv needs ensurepip, which Debian and Ubuntu ship apart from python3 (python3-venv).
if ! .venv/bin/python -c '' 2>/dev/null && ! python3 -c 'import ensurepip' 2>/dev/null; then
  packages+=(python3-venv)
fi
# All at once, so a machine that cannot install them hears of every one in one line.
install_system_packages scripts/test.sh "${packages[@]}"

echo "== .venv: the project's virtual environment (server, dev and docs extras)"
if ! .venv/bin/python -c '' 2>/dev/null; then
  rm -rf .venv
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[server,dev,docs]"
VIRTUAL_ENV="$PWD/.venv"
PATH="$VIRTUAL_ENV/bin:$PATH"
export VIRTUAL_ENV PATH
hash -r

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

echo "== docs: the site builds in strict mode (a broken link or reference fails)"
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet --site-dir "$(mktemp -d)"

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
echo "== bench: bench/scale.py --smoke (paused executions and watchers; fails when a subscriber misses an event)"
python3 bench/scale.py --smoke

# The tests run beside the README's own service on its default address, as on a
# user's machine: a test that binds a fixed port (the default one included) fails
# here instead of there (tests/test_fixed_ports.py looks for the others).
echo "== the README's example service on 127.0.0.1:50051 while the tests run"
eval "$(bash scripts/hold-default-address.sh start)"
trap 'bash scripts/hold-default-address.sh stop "$M3_HOLD_DIR"' EXIT

# In parallel (pytest-xdist): the tests mostly wait on subprocesses and I/O, so more
# workers than cores pay off. --dist loadfile keeps a file's tests (and its
# module-scoped servers) on one worker; files go out in the order tests/conftest.py sets
# (the long ones first). M3_TEST_WORKERS=0 runs it in this process alone.
echo "== pytest"
parallel=0
python3 -m pytest -q -p no:cacheprovider -n "${M3_TEST_WORKERS:-3}" --dist loadfile \
  --no-loadscope-reorder --durations=25 -m "not serial" "$@" || parallel=$?
# Then the few tests marked `serial` (see pyproject's markers), alone, whatever the
# parallel part's outcome. Exit status 5 (none selected, e.g. with a path in "$@" that
# has tests of one kind only) fails only when neither part selected any test.
echo "== pytest: the serial tests"
serial=0
python3 -m pytest -q -p no:cacheprovider -m serial "$@" || serial=$?
if [ "$parallel" -eq 5 ] && [ "$serial" -eq 5 ]; then
  fail "pytest selected no test"
fi
[ "$parallel" -ne 5 ] || parallel=0
[ "$serial" -ne 5 ] || serial=0
if [ "$parallel" -ne 0 ] || [ "$serial" -ne 0 ]; then
  fail "pytest failed: the parallel part exited $parallel, the serial part $serial"
fi
