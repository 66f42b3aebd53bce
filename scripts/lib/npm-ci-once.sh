# shellcheck shell=bash
# Sourced library: run `npm ci` in a directory only when its node_modules is missing or stale.
#
#   source "$ROOT/scripts/lib/npm-ci-once.sh"
#   npm_ci_once [-d DESCRIPTION] [-f FILE]... [-x EXECUTABLE]... [-c CHECK]... DIR LABEL [NPM_CI_ARG...]
#
#   DIR          holds package.json + package-lock.json; packages go to DIR/node_modules.
#   LABEL        prefix of progress messages ("LABEL: ...") and name of the lock file DIR/.LABEL.lock.
#   NPM_CI_ARG   extra arguments for `npm ci` (after --prefix DIR --no-audit --no-fund).
#   -d           what is being installed, for the progress message (default: "packages").
#   -f / -x      a file that must exist / an executable that must be executable after the install.
#   -c           a command (e.g. a function name; run without arguments) that must succeed after the
#                install. Keep it quiet and fast: it also runs on every up-to-date check.
#
# node_modules counts as fresh when DIR/node_modules/.m3-setup-stamp matches the fingerprint (below),
# every -f / -x path is present and every -c check passes. Otherwise `npm ci` runs, the same
# conditions are checked (with an error message naming what is wrong) and the stamp is written.
# Concurrent callers are serialized with flock (when available) and re-check freshness once they
# hold the lock, so only one of them installs.
#
# Fingerprint: sha256 of package.json, package-lock.json, "platform-arch-<Node major version>" and
# the extra npm ci arguments (which add nothing to the hash when there are none). Node's major
# version is in it because `npm ci` runs install scripts and engine checks with the current Node,
# so switching Node majors calls for a fresh install.
#
# Needs `node` and `npm` on PATH. Progress goes to stderr; nothing is written to stdout.
# Returns non-zero after an error message when node_modules cannot be made complete; callers under
# `set -e` just call it as a plain command and exit on failure.
#
# The _nco_* helpers are private: they read the locals of npm_ci_once (bash's dynamic scoping).

npm_ci_once() {
  local usage='usage: npm_ci_once [-d DESC] [-f FILE]... [-x EXE]... [-c CHECK]... DIR LABEL [NPM_CI_ARG...]'
  local description="packages" opt OPTARG OPTIND=1
  local -a files=() executables=() checks=()
  while getopts 'd:f:x:c:' opt; do
    case "$opt" in
      d) description="$OPTARG" ;;
      f) files+=("$OPTARG") ;;
      x) executables+=("$OPTARG") ;;
      c) checks+=("$OPTARG") ;;
      *) printf 'npm_ci_once: %s\n' "$usage" >&2; return 2 ;;
    esac
  done
  shift $((OPTIND - 1))
  (($# >= 2)) || { printf 'npm_ci_once: %s\n' "$usage" >&2; return 2; }
  local dir="$1" label="$2"
  shift 2
  local -a npm_args=("$@")
  local modules="$dir/node_modules"
  local stamp="$modules/.m3-setup-stamp"

  command -v node >/dev/null 2>&1 || { _nco_log "error: no 'node' on PATH (Node >= 20 required)"; return 1; }
  command -v npm >/dev/null 2>&1 || { _nco_log "error: no 'npm' on PATH"; return 1; }
  [[ -f "$dir/package.json" && -f "$dir/package-lock.json" ]] || {
    _nco_log "error: $dir needs a package.json and a package-lock.json"
    return 1
  }

  if _nco_is_fresh; then
    _nco_log "node_modules up to date"
    return 0
  fi
  command -v flock >/dev/null 2>&1 || { _nco_install; return; }
  # Serialize concurrent callers; re-check once the lock is held.
  local lock_fd status=0
  exec {lock_fd}>"$dir/.$label.lock"
  flock "$lock_fd"
  _nco_is_fresh || _nco_install || status=$?
  flock -u "$lock_fd"
  exec {lock_fd}>&-
  return "$status"
}

_nco_log() { printf '%s: %s\n' "$label" "$*" >&2; }

_nco_fingerprint() {
  node -e '
    const fs = require("fs"), crypto = require("crypto");
    const [pkg, lock, ...npmArgs] = process.argv.slice(1);
    const h = crypto.createHash("sha256");
    for (const f of [pkg, lock]) h.update(fs.readFileSync(f));
    h.update(process.platform + "-" + process.arch + "-" + process.versions.node.split(".")[0]);
    h.update(npmArgs.join("\n"));
    process.stdout.write(h.digest("hex"));
  ' "$dir/package.json" "$dir/package-lock.json" "${npm_args[@]}"
}

# Quiet: status 0 when every required path is present and every check passes.
_nco_complete() {
  local path check
  for path in "${files[@]}"; do [[ -f "$path" ]] || return 1; done
  for path in "${executables[@]}"; do [[ -f "$path" && -x "$path" ]] || return 1; done
  for check in "${checks[@]}"; do "$check" >/dev/null 2>&1 || return 1; done
}

_nco_is_fresh() {
  [[ -f "$stamp" ]] && _nco_complete && [[ "$(cat "$stamp")" == "$(_nco_fingerprint)" ]]
}

# Explicit error handling throughout: this runs inside `a || b || c`, where set -e is suspended.
_nco_install() {
  local path check rc=0
  _nco_log "installing $description into $modules (npm ci)"
  rm -f "$stamp" || return
  npm ci --prefix "$dir" --no-audit --no-fund "${npm_args[@]}" >&2 || rc=$?
  ((rc == 0)) || { _nco_log "error: npm ci failed (exit $rc)"; return "$rc"; }
  for path in "${files[@]}"; do
    [[ -f "$path" ]] || { _nco_log "error: $path missing after npm ci"; return 1; }
  done
  for path in "${executables[@]}"; do
    [[ -f "$path" && -x "$path" ]] || { _nco_log "error: $path missing or not executable after npm ci"; return 1; }
  done
  for check in "${checks[@]}"; do
    "$check" >&2 || { _nco_log "error: check '$check' failed after npm ci"; return 1; }
  done
  mkdir -p "$modules" && _nco_fingerprint >"$stamp"  # (npm ci makes no node_modules without deps)
}
