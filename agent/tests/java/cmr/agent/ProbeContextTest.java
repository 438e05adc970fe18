/*
 * ProbeContextTest - the probe's decision on incoming trace headers under each
 * trace-context policy (docs/SECURITY.md): which headers join the caller's trace, which
 * start a trace of their own linked to the foreign parent. Runs without the agent (no
 * natives needed); exits 1 on the first failure.
 */
package cmr.agent;

import javax.crypto.spec.SecretKeySpec;

public final class ProbeContextTest {
    private static int failures;

    private static void check(boolean ok, String what) {
        if (!ok) {
            System.err.println("FAIL: " + what);
            failures++;
        }
    }

    /** The JDK HttpClient's request, sent as a copy with the context headers: everything
     *  else kept, the application's request untouched; its method and URL read for the node. */
    private static void jdkRequestCopy() {
        java.net.http.HttpRequest req = java.net.http.HttpRequest.newBuilder(java.net.URI.create("http://h/p?q=1"))
                .header("x-app", "1")
                .header("traceparent", "theirs")
                .POST(java.net.http.HttpRequest.BodyPublishers.ofString("body"))
                .build();
        Object copy = Probe.withHeaders(req, "ours", "cp");
        check(copy instanceof java.net.http.HttpRequest && copy != req, "request copied");
        if (!(copy instanceof java.net.http.HttpRequest))
            return;
        java.net.http.HttpRequest c = (java.net.http.HttpRequest) copy;
        check(c.headers().allValues("traceparent").equals(java.util.List.of("ours")), "traceparent replaced");
        check(c.headers().firstValue("cmr-parent").orElse("").equals("cp"), "cmr-parent added");
        check(c.headers().firstValue("x-app").orElse("").equals("1"), "the application's header kept");
        check(c.method().equals("POST") && c.uri().equals(req.uri()) && c.bodyPublisher().isPresent()
                      && c.bodyPublisher().get().contentLength() == 4,
              "method, URI and body kept");
        check(req.headers().allValues("traceparent").equals(java.util.List.of("theirs"))
                      && req.headers().firstValue("cmr-parent").isEmpty(),
              "the application's request untouched");
        check(Probe.withHeaders(req, "ours", null) instanceof java.net.http.HttpRequest
                      && ((java.net.http.HttpRequest) Probe.withHeaders(req, "ours", null))
                                 .headers().firstValue("cmr-parent").isEmpty(),
              "no cmr-parent without an agent id");
        check(Probe.withHeaders("not a request", "ours", "cp") == null, "anything else: no copy");
        try {
            String[] line = Probe.requestLine(c);
            check(line != null && line[0].equals("POST") && "http://h/p".equals(Probe.plainUrl(line[1])),
                  "the node's method and URL");
        } catch (ReflectiveOperationException e) {
            check(false, "requestLine: " + e);
        }
    }

    /** An entry call's http.route, from a Servlet 4 mapping or from Servlet 3.1's paths. */
    static void routes() {
        check("/shop/orders/*".equals(Probe.servletRoute("/shop", "PATH", "/orders/*", null, null)), "route: path mapping");
        check("/check".equals(Probe.servletRoute("", "EXACT", "/check", null, null)), "route: exact mapping");
        check("/shop/*.jsp".equals(Probe.servletRoute("/shop", "EXTENSION", "*.jsp", null, null)), "route: extension");
        check("/*".equals(Probe.servletRoute("", "DEFAULT", "/", null, null)), "route: the default servlet");
        check("/shop/".equals(Probe.servletRoute("/shop", "CONTEXT_ROOT", "", null, null)), "route: context root");
        check(Probe.servletRoute("", "SOMETHING_NEW", "/x", null, null) == null, "route: an unknown match");
        // Servlet 3.1 (no mapping): path info left means a path mapping
        check("/stock/*".equals(Probe.servletRoute("", null, null, "/stock", "/7")), "route: 3.1 path mapping");
        check("/app/*".equals(Probe.servletRoute("/app", null, null, "", "/a/b")), "route: 3.1 /* mapping");
        check("/app/check".equals(Probe.servletRoute("/app", null, null, "/check", null)), "route: 3.1 exact");
        check(Probe.servletRoute(null, null, null, null, null) == null, "route: nothing known");
    }

    public static void main(String[] args) {
        SecretKeySpec key = new SecretKeySpec(new byte[32], "HmacSHA256");
        byte[] other = new byte[32];
        other[0] = 1;
        SecretKeySpec wrongKey = new SecretKeySpec(other, "HmacSHA256");
        long hi = 0x1234L, lo = 0x5678L, agent = 0xabcL, segment = 0x77L, event = 5;
        // an outgoing call's URL as its node shows it: no query, fragment or user info
        check("http://h:8080/a/b".equals(Probe.plainUrl("http://h:8080/a/b?token=s3cret#x")), "url: query cut");
        check("https://h/p".equals(Probe.plainUrl("https://user:pw@h/p")), "url: user info cut");
        check("http://h/p@x".equals(Probe.plainUrl("http://h/p@x")), "url: @ in the path kept");
        check("/rel".equals(Probe.plainUrl("/rel?q")) && Probe.plainUrl(null) == null, "url: relative, null");
        jdkRequestCopy();
        routes();
        String tp = Probe.traceparent(hi, lo, segment);
        long now = System.currentTimeMillis() / 1000;
        String bare = Long.toHexString(agent) + ':' + Long.toHexString(segment) + ':' + Long.toHexString(event);
        String signed = bare + ':' + Long.toHexString(now) + ':' + Probe.contextMac(key, hi, lo, agent, segment, event, now);
        String forged = bare + ':' + Long.toHexString(now) + ':'
                + Probe.contextMac(wrongKey, hi, lo, agent, segment, event, now);
        String tampered = Long.toHexString(agent) + ':' + Long.toHexString(segment) + ":6:" + Long.toHexString(now) + ':'
                + Probe.contextMac(key, hi, lo, agent, segment, event, now); // event changed, MAC kept
        long old = now - Probe.MAC_VALID_S - 60; // a header seen by a callee outside the fleet, replayed later
        String replayed = bare + ':' + Long.toHexString(old) + ':' + Probe.contextMac(key, hi, lo, agent, segment, event, old);
        String redated = bare + ':' + Long.toHexString(now) + ':'
                + Probe.contextMac(key, hi, lo, agent, segment, event, old); // old MAC, new time

        // AUTHENTICATED: only a valid MAC joins the caller's trace.
        Probe.Context c = Probe.remoteContext(tp, signed, Probe.POLICY_AUTHENTICATED, key);
        check(c != null && c.traceHi == hi && c.traceLo == lo && c.agent == agent && c.event == event,
              "authenticated header joins the caller's trace");
        for (String h : new String[] {null, bare, forged, tampered, replayed, redated, signed + "x"}) {
            c = Probe.remoteContext(tp, h, Probe.POLICY_AUTHENTICATED, key);
            check(c != null && !(c.traceHi == hi && c.traceLo == lo) && c.agent == 0 && c.segment == segment
                          && c.event == -1,
                  "unauthenticated header (" + h + ") starts its own trace linked to the foreign parent");
        }
        c = Probe.remoteContext(tp, signed, Probe.POLICY_AUTHENTICATED, null);
        check(c != null && c.agent == 0 && c.traceHi != hi, "no key: nothing verifies");
        Probe.Context a = Probe.remoteContext(tp, null, Probe.POLICY_AUTHENTICATED, key);
        Probe.Context b = Probe.remoteContext(tp, null, Probe.POLICY_AUTHENTICATED, key);
        check(a.traceHi != b.traceHi || a.traceLo != b.traceLo, "two foreign requests never share a trace");

        // ANY: a traceparent joins its trace; cmr-parent joins exactly, MAC or not.
        c = Probe.remoteContext(tp, null, Probe.POLICY_ANY, key);
        check(c != null && c.traceHi == hi && c.traceLo == lo && c.agent == 0, "ANY: traceparent joins");
        c = Probe.remoteContext(tp, bare, Probe.POLICY_ANY, key);
        check(c != null && c.agent == agent && c.event == event, "ANY: bare cmr-parent joins exactly");
        c = Probe.remoteContext(tp, signed, Probe.POLICY_ANY, key);
        check(c != null && c.agent == agent, "ANY: signed cmr-parent joins exactly");

        // NONE: never joins.
        c = Probe.remoteContext(tp, signed, Probe.POLICY_NONE, key);
        check(c != null && c.traceHi != hi && c.agent == 0 && c.segment == segment, "NONE: own trace, linked");

        // Garbage stays garbage under every policy.
        for (int policy = 0; policy <= 2; policy++) {
            check(Probe.remoteContext(null, signed, policy, key) == null, "no traceparent: no context");
            check(Probe.remoteContext("00-zz", signed, policy, key) == null, "bad traceparent: no context");
        }
        // The MAC depends on every number it covers.
        check(!Probe.contextMac(key, hi, lo, agent, segment, event, now)
                       .equals(Probe.contextMac(key, hi + 1, lo, agent, segment, event, now)),
              "MAC covers the trace id");
        check(!Probe.contextMac(key, hi, lo, agent, segment, event, now)
                       .equals(Probe.contextMac(key, hi, lo, agent, segment, event, now + 1)),
              "MAC covers the time");
        check(Probe.contextMac(null, hi, lo, agent, segment, event, now) == null, "no key, no MAC");

        if (failures > 0) {
            System.err.println(failures + " failed");
            System.exit(1);
        }
        System.out.println("ProbeContextTest: all checks passed");
    }
}
