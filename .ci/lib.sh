# Shared helpers of the CI scripts (sourced by .ci/run, .ci/engine.sh, .ci/vllm.sh).
# Set CI_TAG (e.g. "[engine.sh]") before sourcing to prefix the messages.

CI_TAG="${CI_TAG:-[ci]}"

step() {  # step NAME CMD...: run CMD, print how long it took, return CMD's status
    local name=$1; shift
    local t0; t0=$(date +%s)
    local rc=0
    echo "+ $*"
    "$@" || rc=$?
    echo "${CI_TAG} ${name}: $(( $(date +%s) - t0 )) s$([ "$rc" -eq 0 ] || echo " (exit $rc)")"
    return "$rc"
}

require_tests() {  # require_tests PYTHON JUNIT_XML LABEL: fail unless >= 1 test ran, none skipped
    # pytest exits 0 when everything was skipped; a step whose tests all skipped
    # (a missing dependency, a missing server) must fail the run.
    "$1" - "$2" "$CI_TAG" "$3" <<'PYEOF'
import sys
import xml.etree.ElementTree as ET

path, tag, label = sys.argv[1:4]
root = ET.parse(path).getroot()
suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
tests = sum(int(s.get("tests", 0)) for s in suites)
skipped = sum(int(s.get("skipped", 0)) for s in suites)
if tests == 0 or skipped:
    sys.exit(f"{tag} FAIL: {tests} {label} tests ran, {skipped} skipped")
print(f"{tag} {tests} {label} tests ran, none skipped")
PYEOF
}

marked_tests() {  # marked_tests PYTHON MARKER LABEL [PYTEST ARGS...]: run one marker's tests
    # in a step of their own; fail on a failure, or when none ran or one skipped.
    local py=$1 marker=$2 label=$3; shift 3
    local junit; junit="$(mktemp --suffix=.xml)"
    local rc=0
    step "$label tests" "$py" -m pytest -m "$marker" -q -p no:cacheprovider \
        --junitxml="$junit" "$@" || rc=$?
    if [ "$rc" -eq 0 ]; then
        require_tests "$py" "$junit" "$label" || rc=$?
    else
        echo "${CI_TAG} FAIL: $label tests exited with $rc"
    fi
    rm -f "$junit"
    return "$rc"
}

tests_outcome() {  # tests_outcome RC LABEL SCORECARD WHAT WHY_MISSING: show the scorecard
    # file the tests wrote (or say why there is none), then fail with RC when it is not 0.
    local rc=$1 label=$2 card=$3 what=$4 why=$5
    if [ -s "$card" ]; then
        echo "${CI_TAG} ${what}:"
        cat "$card"
    else
        echo "${CI_TAG} no scorecard was written (${why})"
    fi
    if [ "$rc" -ne 0 ]; then
        echo "${CI_TAG} FAIL: ${label} tests exited with $rc"
        return "$rc"
    fi
}
