#!/usr/bin/env bash
# JVM test: Tomcat 10 (Debian's tomcat10 + tomcat10-examples) starts on 127.0.0.1:<free
# port> with every loaded class instrumented with every probe kind under -Xverify:all and
# serves the examples webapp (servlets and JSPs, which Jasper compiles at request time).
# The same requests are made against an uninstrumented Tomcat: status codes must match,
# and the bodies of the deterministic pages too. Tomcat is stopped with SIGTERM (graceful
# shutdown), bounded in time.
#   jvm_tomcat.sh AGENT JAVA_HOME WORKDIR
source "$(dirname "$0")/jvm_common.sh"
cf_init "$@"
TC_HOME=/usr/share/tomcat10
EXAMPLES=/usr/share/tomcat10-examples/examples
[ -f "$TC_HOME/bin/bootstrap.jar" ] && [ -d "$EXAMPLES" ] || { echo "SKIP: tomcat10/tomcat10-examples not installed"; exit 77; }
CONF=/etc/tomcat10
[ -f "$CONF/server.xml" ] || CONF=/var/lib/tomcat10/conf

PAGES=(
  "/examples/"
  "/examples/servlets/servlet/HelloWorldExample"
  "/examples/servlets/servlet/RequestParamExample?firstname=Ada&lastname=Lovelace"
  "/examples/servlets/servlet/RequestHeaderExample"
  "/examples/servlets/servlet/SessionExample"
  "/examples/jsp/jsp2/el/basic-arithmetic.jsp"
  "/examples/jsp/jsp2/el/functions.jsp?foo=JSP+2.0"
  "/examples/jsp/jsp2/simpletag/repeat.jsp"
  "/examples/jsp/jsp2/tagfiles/hello.jsp"
  "/examples/jsp/num/numguess.jsp"
  "/examples/jsp/dates/date.jsp"
  "/examples/jsp/include/include.jsp"
  "/examples/servlets/nonblocking/bytecounter.html"
  "/examples/no-such-page"
)
# pages whose body does not depend on time, sessions or headers
STABLE=(1 2 5 6 7 8 13)

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

make_base() {  # make_base DIR PORT
  local b=$1
  mkdir -p "$b/conf" "$b/logs" "$b/temp" "$b/work" "$b/webapps"
  cp -r "$CONF"/* "$b/conf/" 2>/dev/null || true
  sed -i -e "s/<Connector port=\"8080\"/<Connector address=\"127.0.0.1\" port=\"$2\"/" \
         -e 's/<Server port="[0-9-]*"/<Server port="-1"/' "$b/conf/server.xml"
  ln -s "$EXAMPLES" "$b/webapps/examples"
}

run_tomcat() {  # run_tomcat NAME OPTS...
  local name=$1; shift
  local port; port=$(free_port)
  local b=$WORK/$name
  make_base "$b" "$port"
  "$JAVA" "$@" -Dcatalina.home=$TC_HOME -Dcatalina.base="$b" -Djava.io.tmpdir="$b/temp" \
    -Djava.util.logging.manager=org.apache.juli.ClassLoaderLogManager \
    -Djava.util.logging.config.file="$b/conf/logging.properties" \
    -cp "$TC_HOME/bin/bootstrap.jar:$TC_HOME/bin/tomcat-juli.jar" \
    org.apache.catalina.startup.Bootstrap start > "$b/stdout.log" 2>&1 &
  local pid=$!
  local up=0
  for _ in $(seq 1 240); do
    if curl -s -o /dev/null "http://127.0.0.1:$port/examples/"; then up=1; break; fi
    kill -0 $pid 2>/dev/null || break
    sleep 0.5
  done
  [ $up = 1 ] || { fail "$name: Tomcat did not come up"; tail -20 "$b/stdout.log"; }
  local i=0
  for p in "${PAGES[@]}"; do
    code=$(curl -s -m 60 -o "$b/page$i.html" -w '%{http_code}' "http://127.0.0.1:$port$p" || echo 000)
    echo "$i $code $p" >> "$b/codes.txt"
    i=$((i + 1))
  done
  kill -TERM $pid 2>/dev/null || true
  for _ in $(seq 1 120); do kill -0 $pid 2>/dev/null || break; sleep 0.5; done
  if kill -0 $pid 2>/dev/null; then fail "$name: Tomcat did not stop in 60 s"; kill -KILL $pid; fi
  wait $pid 2>/dev/null || true
  cat "$b/codes.txt"
}

run_tomcat plain
# shellcheck disable=SC2046
run_tomcat instrumented $(agent_opts tomcat)
diff "$WORK/plain/codes.txt" "$WORK/instrumented/codes.txt" || fail "HTTP status codes differ"
for i in "${STABLE[@]}"; do
  cmp -s "$WORK/plain/page$i.html" "$WORK/instrumented/page$i.html" || fail "page $i (${PAGES[$i]}) differs"
done
grep -q '^1 200 ' "$WORK/instrumented/codes.txt" || fail "HelloWorldExample not served"
grep -q '^5 200 ' "$WORK/instrumented/codes.txt" || fail "JSP not compiled/served"
check_no_verify_error "$WORK"/instrumented/stdout.log "$WORK"/instrumented/logs/*
check_report tomcat
cf_done
