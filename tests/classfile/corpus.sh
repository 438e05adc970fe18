#!/usr/bin/env bash
# Corpus test of the class-file engine: every class must parse and write back
# byte-identical, every method's callees resolve, every non-refused method instrument (each
# probe kind, and all kinds stacked) into a class that passes the structural check.
# Prints counts of classes, methods instrumented and refusals by reason.
#
#   corpus.sh CF_CORPUS sample|full WORKDIR
#     sample: java.base + jdk.compiler of JDK 17, java.base of JDK 25 (if installed), and a
#             few Debian jars (asm, h2, tomcat catalina, groovy): the CI run.
#     full:   every class of every module of JDK 17 and JDK 25, and every jar of the Debian
#             Java packages listed in PACKAGES below (the documented full-corpus command).
set -euo pipefail
CF_CORPUS=$1; MODE=$2; WORK=$3
JDK17=/usr/lib/jvm/java-17-openjdk-amd64
JDK25=/usr/lib/jvm/temurin-25-jdk-amd64
PACKAGES="libtomcat10-java tomcat10-examples libjetty9-java libh2-java libderby-java groovy libguava-java libasm-java libbyte-buddy-java"
rm -rf "$WORK"; mkdir -p "$WORK"

extract_jdk() {  # extract_jdk JDK DEST [MODULE...]
  local jdk=$1 dest=$2; shift 2
  [ -f "$jdk/lib/modules" ] || return 0
  if [ $# = 0 ]; then
    "$jdk/bin/jimage" extract --dir "$dest" "$jdk/lib/modules"
  else
    for m in "$@"; do
      "$jdk/bin/jimage" extract --include "regex:/$m/.*" --dir "$dest" "$jdk/lib/modules"
    done
  fi
}

extract_jar() {  # extract_jar JAR DEST
  local d; d="$2/$(basename "$1" .jar)"
  mkdir -p "$d"
  unzip -qo "$1" '*.class' -d "$d" 2>/dev/null || true
}

if [ "$MODE" = full ]; then
  extract_jdk $JDK17 "$WORK/jdk17"
  extract_jdk $JDK25 "$WORK/jdk25"
  # shellcheck disable=SC2086
  for j in $(dpkg -L $PACKAGES 2>/dev/null | grep '\.jar$' | xargs -r readlink -f | sort -u); do
    extract_jar "$j" "$WORK/debian"
  done
  EXTRA=$(dpkg -L tomcat10-examples 2>/dev/null | grep '/WEB-INF/classes$' | head -1 || true)
else
  extract_jdk $JDK17 "$WORK/jdk17" java.base jdk.compiler
  extract_jdk $JDK25 "$WORK/jdk25" java.base
  for j in /usr/share/java/asm.jar /usr/share/java/h2.jar /usr/share/java/tomcat10-catalina.jar \
           /usr/share/groovy/lib/groovy.jar; do
    [ -f "$j" ] && extract_jar "$(readlink -f "$j")" "$WORK/debian"
  done
  EXTRA=
fi
"$CF_CORPUS" --instrument "$WORK" ${EXTRA:+"$EXTRA"}
rm -rf "$WORK"
