# Sourced by the MongoDB cost benchmarks (bench-ack-cost, bench-concurrency):
# the MongoDB to measure and the Python that measures it.
#
#   scratch_mongo NAME    MONGO_URI when set; otherwise fresh stand-ins from
#                         scripts/test-servers, stopped when the script exits
#                         (refused while the test servers already run, so a
#                         benchmark never measures a server the suite loads).
#                         Sets PYTHON (the stand-ins' venv, which has pymongo,
#                         else python3) and PYTHONPATH to scripts/lib, for
#                         scratch_messages.py.
# Expects ROOT (the repository).

scratch_mongo() {
    local name=$1
    SCRATCH_STARTED=0
    if [[ -z "${MONGO_URI:-}" ]]; then
        if "$ROOT/scripts/test-servers" status >/dev/null 2>&1; then
            echo "$name: scripts/test-servers are running; stop them first (scripts/test-servers stop)" >&2
            exit 1
        fi
        "$ROOT/scripts/test-servers" start >&2
        SCRATCH_STARTED=1
        # shellcheck disable=SC1091
        source "$ROOT/.test-servers/env"
    fi
    trap 'if ((SCRATCH_STARTED)); then "$ROOT/scripts/test-servers" stop >&2; fi' EXIT
    PYTHON="$ROOT/.test-servers/venv/bin/python3"
    [[ -x "$PYTHON" ]] || PYTHON=python3
    export PYTHONPATH="$ROOT/scripts/lib${PYTHONPATH:+:$PYTHONPATH}"
}
