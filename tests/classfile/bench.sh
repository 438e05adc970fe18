#!/usr/bin/env bash
# Benchmark of the class-file engine against ASM (Debian's libasm-java), single core,
# same in-memory corpus: JDK 17 java.base + jdk.compiler and the classes of a few Debian
# jars (asm, h2, tomcat catalina, groovy). Prints numbers; not a pass/fail test.
#   bench.sh BUILD_DIR [SECONDS]      e.g. tests/classfile/bench.sh build 10
# Each mode runs SECONDS split in five rounds; each engine reports its best round.
set -euo pipefail
BUILD=$(cd "$1" && pwd); SECONDS_PER_MODE=${2:-5}
HERE=$(cd "$(dirname "$0")" && pwd)
JDK=/usr/lib/jvm/java-17-openjdk-amd64
WORK=$(mktemp -d /tmp/cf-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
for m in java.base jdk.compiler; do
  "$JDK/bin/jimage" extract --include "regex:/$m/.*" --dir "$WORK/corpus/jdk17" "$JDK/lib/modules"
done
for j in asm h2 tomcat10-catalina; do
  unzip -qo "$(readlink -f /usr/share/java/$j.jar)" '*.class' -d "$WORK/corpus/$j" 2>/dev/null || true
done
unzip -qo "$(readlink -f /usr/share/groovy/lib/groovy.jar)" '*.class' -d "$WORK/corpus/groovy" 2>/dev/null || true
# keep exactly the classes both engines accept (ASM 9.4 stops at Java 20; module-info etc.)
find "$WORK/corpus" -name 'module-info.class' -delete

CP=/usr/share/java/asm.jar:/usr/share/java/asm-commons.jar:/usr/share/java/asm-tree.jar:/usr/share/java/asm-analysis.jar
"$JDK/bin/javac" -nowarn -cp "$CP" -d "$WORK/asmbench" "$HERE/java/bench/AsmBench.java"
echo "== C engine ($(nproc) cores present, runs on one: taskset -c 0)"
taskset -c 0 "$BUILD/classfile/cf_bench" --seconds "$SECONDS_PER_MODE" "$WORK/corpus" | tee "$WORK/c.txt"
echo "== ASM $(basename "$(readlink -f /usr/share/java/asm.jar)" .jar) on JDK 17, warmed up, one core"
taskset -c 0 "$JDK/bin/java" -XX:ActiveProcessorCount=1 -Xms2g -Xmx2g -cp "$WORK/asmbench:$CP" AsmBench "$SECONDS_PER_MODE" "$WORK/corpus" | tee "$WORK/asm.txt"
ratio() {  # ratio MODE
  c=$(grep " $1 " "$WORK/c.txt" | sed 's/.* \([0-9.]*\) MB\/s.*/\1/')
  a=$(grep " $1 " "$WORK/asm.txt" | sed 's/.* \([0-9.]*\) MB\/s.*/\1/')
  awk -v c="$c" -v a="$a" -v m="$1" 'BEGIN { printf "ratio %-24s C/ASM = %.2fx (MB/s %s vs %s)\n", m, c / a, c, a }'
}
ratio parse+write
ratio parse+instrument+write
