# Shared helpers of the class-file engine's JVM tests (sourced by jvm_*.sh).
#   AGENT      path of libcf_test_agent.so
#   JAVA_HOME  JDK to run
#   WORK       scratch directory (recreated)
set -euo pipefail

cf_init() {
  AGENT=$1; JAVA_HOME=$2; WORK=$3
  if [ ! -x "$JAVA_HOME/bin/java" ]; then
    echo "SKIP: no JDK at $JAVA_HOME"; exit 77
  fi
  rm -rf "$WORK"; mkdir -p "$WORK"
  HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  "$JAVA_HOME/bin/javac" -d "$WORK/helper" "$HERE/java/cmrtest/Probes.java"
  JAVA="$JAVA_HOME/bin/java"
  FAILED=0
}

# agent_opts NAME -> JVM options that instrument every class and write $WORK/NAME.report
agent_opts() {
  echo "-Xverify:all -XX:ErrorFile=$WORK/hs_err_%p.log -agentpath:$AGENT=helper=$WORK/helper,report=$WORK/$1.report,retransform"
}

fail() { echo "FAIL: $*"; FAILED=1; }

# check_report NAME: zero engine errors, balanced probes for every kind, no VerifyError.
check_report() {
  local r=$WORK/$1.report
  local crash
  for crash in "$WORK"/hs_err_*.log; do  # a JVM crash: show where
    [ -f "$crash" ] || continue
    fail "$1: the JVM crashed ($crash)"
    grep -m12 -E '^(# (SIG|Problematic|V |C |j )|[VJjC] )' "$crash" || true
  done
  [ -f "$r" ] || { fail "$1: no agent report"; return; }
  echo "--- $1 report"; grep -E '^(classes_|methods_|errors|retrans|refused_|timer_|anchor_|conditional_|live|bad_args)' "$r" | grep -v '=0$' || true
  for k in errors pass_mismatch bad_args retransform_failed helper_missing; do
    v=$(grep "^$k=" "$r" | cut -d= -f2 || true)
    if [ -n "$v" ] && [ "$v" != 0 ]; then fail "$1: $k=$v"; fi
  done
  # balanced probes; a thread stopped between two stacked probe calls may leave each kind
  # off by one (unbalanced_tolerance counts such threads)
  local tol; tol=$(grep '^unbalanced_tolerance=' "$r" | cut -d= -f2 || true)
  for k in timer_unbalanced anchor_unbalanced conditional_unbalanced; do
    v=$(grep "^$k=" "$r" | cut -d= -f2 || true)
    if [ -n "$v" ] && [ "${v#-}" -gt "${tol:-0}" ]; then fail "$1: $k=$v (tolerance ${tol:-0})"; fi
  done
  local ci; ci=$(grep '^classes_instrumented=' "$r" | cut -d= -f2)
  [ "${ci:-0}" -gt 0 ] || fail "$1: no class instrumented"
  local te; te=$(grep '^timer_enter=' "$r" | cut -d= -f2)
  [ "${te:-0}" -gt 0 ] || fail "$1: no probe ran"
  if [ -s "$r.errors" ]; then fail "$1: agent errors:"; head -5 "$r.errors"; fi
}

# check_no_verify_error FILE...: the JVM's verifier rejected nothing.
check_no_verify_error() {
  if grep -l -E 'VerifyError|ClassFormatError|IncompatibleClassChangeError|NoClassDefFoundError: cmrtest' "$@" 2>/dev/null; then
    fail "verifier or class-format error in the output above"
    grep -h -m5 -E 'VerifyError|ClassFormatError|IncompatibleClassChangeError' "$@" || true
  fi
}

cf_done() {
  if [ "$FAILED" != 0 ]; then echo "RESULT: FAILED"; exit 1; fi
  echo "RESULT: OK"
}
