#!/usr/bin/env bash
# JVM test: the Groovy runtime (Debian's groovy) runs a script with every loaded class
# instrumented with every probe kind under -Xverify:all; output must match the plain run.
#   jvm_groovy.sh AGENT JAVA_HOME WORKDIR
source "$(dirname "$0")/jvm_common.sh"
cf_init "$@"
[ -d /usr/share/groovy/lib ] || { echo "SKIP: groovy not installed"; exit 77; }
CP="/usr/share/groovy/lib/*"
"$JAVA" -cp "$CP" groovy.ui.GroovyMain "$HERE/java/prog/script.groovy" > "$WORK/run0.txt" 2>&1
# shellcheck disable=SC2046
"$JAVA" $(agent_opts groovy) -cp "$CP" groovy.ui.GroovyMain "$HERE/java/prog/script.groovy" \
  > "$WORK/run1.txt" 2>&1 || fail "instrumented groovy failed"
cat "$WORK/run1.txt"
diff "$WORK/run0.txt" "$WORK/run1.txt" || fail "groovy output differs when instrumented"
check_no_verify_error "$WORK/run1.txt"
check_report groovy
cf_done
