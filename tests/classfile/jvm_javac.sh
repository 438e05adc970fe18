#!/usr/bin/env bash
# JVM test: javac (every loaded class instrumented with every probe kind, -Xverify:all)
# compiles the multi-file program in java/prog plus a generated Big.java; the classes it
# produces must equal those of an uninstrumented javac. Then the program runs instrumented
# and must print exactly what it prints uninstrumented.
# With a 4th argument (the cf_gen_jsr tool) it also runs JsrDemo, a version-49 class with a
# jsr/ret subroutine, which the old type-inference verifier checks, and Old45 (version 45.0).
#   jvm_javac.sh AGENT JAVA_HOME WORKDIR [CF_GEN_JSR]
GEN_JSR=${4:-}
source "$(dirname "$0")/jvm_common.sh"
cf_init "$1" "$2" "$3"
mkdir -p "$WORK/src"
cp "$HERE"/java/prog/app/*.java "$WORK/src/"
python3 "$HERE/gen_big.py" "$WORK/src/Big.java"

"$JAVA_HOME/bin/javac" -d "$WORK/out0" "$WORK"/src/*.java
# shellcheck disable=SC2046
"$JAVA" $(agent_opts javac) -m jdk.compiler/com.sun.tools.javac.Main -d "$WORK/out1" "$WORK"/src/*.java \
  > "$WORK/javac.log" 2>&1 || { cat "$WORK/javac.log"; fail "instrumented javac failed"; }
if diff -r "$WORK/out0" "$WORK/out1" > /dev/null; then echo "javac output identical"; else fail "instrumented javac produced different classes"; fi

"$JAVA" -cp "$WORK/out0" app.Main > "$WORK/run0.txt" 2>&1
# shellcheck disable=SC2046
"$JAVA" $(agent_opts program) -cp "$WORK/out0" app.Main > "$WORK/run1.txt" 2>&1 || fail "instrumented program failed"
cat "$WORK/run1.txt"
diff "$WORK/run0.txt" "$WORK/run1.txt" || fail "program output differs when instrumented"
check_no_verify_error "$WORK/javac.log" "$WORK/run1.txt"
check_report javac
check_report program
# Big.loopWithBreak needs an inverted+widened branch, Big.loopPlain a goto_w trampoline
grep -q '^refused_branch-needs-frame=0$' "$WORK/program.report" || fail "a far branch was refused (Big)"

if [ -n "$GEN_JSR" ]; then
  mkdir -p "$WORK/jsr"
  "$GEN_JSR" "$WORK/jsr"
  "$JAVA" -Xverify:all -cp "$WORK/jsr" JsrDemo > "$WORK/jsr0.txt" 2>&1
  # shellcheck disable=SC2046
  "$JAVA" $(agent_opts jsr) -cp "$WORK/jsr" JsrDemo > "$WORK/jsr1.txt" 2>&1 || fail "instrumented JsrDemo failed"
  echo "JsrDemo: $(tr '\n' ' ' < "$WORK/jsr1.txt")"
  printf '10\n-100\n2\n' | diff - "$WORK/jsr0.txt" || fail "JsrDemo output unexpected"
  diff "$WORK/jsr0.txt" "$WORK/jsr1.txt" || fail "JsrDemo output differs when instrumented"
  check_no_verify_error "$WORK/jsr1.txt"
  check_report jsr
  grep -q '^refused_jsr-ret=0$' "$WORK/jsr.report" || fail "jsr/ret method refused"
  # Old45: class-file version 45.0
  "$JAVA" -Xverify:all -cp "$WORK/jsr" Old45 > "$WORK/old0.txt" 2>&1
  # shellcheck disable=SC2046
  "$JAVA" $(agent_opts old45) -cp "$WORK/jsr" Old45 > "$WORK/old1.txt" 2>&1 || fail "instrumented Old45 failed"
  echo "Old45: $(cat "$WORK/old1.txt")"
  echo "old 45.0" | diff - "$WORK/old1.txt" || fail "Old45 output differs when instrumented"
  check_no_verify_error "$WORK/old1.txt"
  check_report old45
fi
cf_done
