/*
 * ProbeDiagnosisTest - the probe's side of a diagnosis (docs/DIAGNOSIS.md), without the
 * agent: the calling thread records into a ring over a direct buffer, the anchors are set
 * directly. Checks what lands in the ring: a conditional probe records only while its
 * thread is inside an anchor of a running diagnosis (not before, not after, not on another
 * thread), the anchor marks the context (DIAG with the diagnosis id; DIAG_END with the
 * number of conditional calls), nested anchors keep one context, an anchor the agent has
 * not named records like an invocation sequence only, and conditions on the transaction's
 * request are judged (none: they do not hold). Also the glob, the query-parameter reader
 * and the agent's anchor text. Exits 1 on the first failure.
 */
package cmr.agent;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.ArrayList;
import java.util.List;

public final class ProbeDiagnosisTest {
    private static int failures;

    private static void check(boolean ok, String what) {
        if (!ok) {
            System.err.println("FAIL: " + what);
            failures++;
        }
    }

    /** One record of the ring: kind, id, aux. */
    static final class Rec {
        final int kind, aux;
        final long id;

        Rec(int kind, long id, int aux) {
            this.kind = kind;
            this.id = id;
            this.aux = aux;
        }

        @Override
        public String toString() {
            return kind + ":" + Long.toHexString(id) + ":" + aux;
        }
    }

    static final int RECORDS = 256;

    /** The records written since `from` (the ring never wraps in these tests). */
    static List<Rec> records(ByteBuffer b, long from) {
        long w = b.getLong(Probe.WRITE);
        List<Rec> out = new ArrayList<>();
        for (long i = from; i < w; i++) {
            int off = Probe.HEADER + (int) i * Probe.RECORD;
            long kindAux = b.getLong(off + 16);
            out.add(new Rec((int) kindAux, b.getLong(off), (int) (kindAux >>> 32)));
        }
        return out;
    }

    static String kinds(List<Rec> l) {
        StringBuilder s = new StringBuilder();
        for (Rec r : l)
            s.append(s.length() == 0 ? "" : ",").append(r.kind);
        return s.toString();
    }

    static Probe.Anchor anchor(long method, long diag) {
        return new Probe.Anchor(method, diag, new int[0], new String[0], new String[0]);
    }

    public static void main(String[] args) throws Exception {
        // the glob of conditions
        check(Probe.glob("/checkout*", "/checkout/42"), "glob: prefix");
        check(!Probe.glob("/checkout*", "/cart"), "glob: no match");
        check(Probe.glob("*a?c*", "xxabcyy"), "glob: ? and *");
        check(Probe.glob("POST", "POST") && !Probe.glob("POST", "POSTX"), "glob: exact");
        check(Probe.glob("*", ""), "glob: * matches empty");
        // query parameters
        check("42".equals(Probe.queryParameter("a=1&sku=42&b", "sku")), "query: value");
        check("".equals(Probe.queryParameter("a=1&flag", "flag")), "query: no value");
        check("x y".equals(Probe.queryParameter("q=x+y", "q")), "query: decoded");
        check(Probe.queryParameter("a=1", "sku") == null && Probe.queryParameter(null, "a") == null, "query: absent");
        // a servlet's URI as a path: no path parameters (session ids), percent-decoded
        check("/checkout/ä b".equals(Probe.servletPath("/checkout/%C3%A4%20b;jsessionid=ABC")), "servlet path: "
                + Probe.servletPath("/checkout/%C3%A4%20b;jsessionid=ABC"));
        check("/a%".equals(Probe.servletPath("/a%")) && "/x".equals(Probe.servletPath("/x")), "servlet path: plain");
        // the agent's anchor text
        Probe.Anchor[] parsed = Probe.parseAnchors("2a\tff\t0\t\tPOST\t3\tX-Tenant\tacme*\n10\t1\nbad\n");
        check(parsed.length == 2, "anchors parsed: " + parsed.length);
        check(parsed[0].method == 0x2a && parsed[0].diagnosis == 0xff && parsed[0].kinds.length == 2
                && parsed[0].kinds[1] == Probe.COND_HTTP_HEADER && "X-Tenant".equals(parsed[0].names[1])
                && "acme*".equals(parsed[0].patterns[1]), "anchor with two conditions");
        check(parsed[1].method == 0x10 && parsed[1].kinds.length == 0, "anchor without conditions");
        check(Probe.parseAnchors("").length == 0 && Probe.parseAnchors(null).length == 0, "no anchors");

        ByteBuffer ring = ByteBuffer.allocateDirect(Probe.HEADER + RECORDS * Probe.RECORD).order(ByteOrder.LITTLE_ENDIAN);
        Probe.testRing(ring);
        long ANCHOR = 0xA, CALLEE = 0xC, PLAIN = 0xB, DIAG = 0x77;
        Probe.setAnchors(new Probe.Anchor[] {anchor(ANCHOR, DIAG)});

        // outside the anchor: a conditional probe records nothing
        long at = ring.getLong(Probe.WRITE);
        Probe.condEnter(CALLEE);
        Probe.condExit(CALLEE);
        check(records(ring, at).isEmpty(), "no record outside the anchor: " + records(ring, at));

        // inside: the anchor opens the segment and the context, the callee records
        at = ring.getLong(Probe.WRITE);
        Probe.anchorEnter(ANCHOR);
        Probe.condEnter(CALLEE);
        Probe.condEnter(CALLEE); // recursion
        Probe.condExit(CALLEE);
        Probe.condExitThrow(CALLEE);
        Probe.anchorEnter(ANCHOR); // nested anchor: the same context
        Probe.condEnter(CALLEE);
        Probe.condExit(CALLEE);
        Probe.anchorExit(ANCHOR);
        Probe.anchorExit(ANCHOR);
        List<Rec> in = records(ring, at);
        String want = Probe.SEG_BEGIN + "," + Probe.SEG_TRACE + ",1,8,1,1,2,3,1,1,2,2,9,2";
        check(kinds(in).equals(want), "records inside the anchor: " + kinds(in) + " want " + want);
        Rec diag = in.get(3), end = in.get(in.size() - 2);
        check(diag.kind == Probe.DIAG && diag.id == DIAG, "DIAG names the diagnosis: " + diag);
        check(end.kind == Probe.DIAG_END && end.id == DIAG && end.aux == 3, "DIAG_END counts 3 calls: " + end);
        check(in.get(4).id == CALLEE && in.get(4).aux == 2 && in.get(5).aux == 3, "callees at depth 2 and 3");

        // after the anchor: nothing again
        at = ring.getLong(Probe.WRITE);
        Probe.condEnter(CALLEE);
        Probe.condExit(CALLEE);
        check(records(ring, at).isEmpty(), "no record after the anchor: " + records(ring, at));

        // another thread's callee while this thread is inside the anchor: nothing there
        Probe.anchorEnter(ANCHOR);
        ByteBuffer other = ByteBuffer.allocateDirect(Probe.HEADER + RECORDS * Probe.RECORD).order(ByteOrder.LITTLE_ENDIAN);
        Thread t = new Thread(() -> {
            Probe.testRing(other);
            Probe.condEnter(CALLEE);
            Probe.condExit(CALLEE);
        });
        t.start();
        t.join();
        Probe.anchorExit(ANCHOR);
        check(records(other, 0).isEmpty(), "another thread records nothing: " + records(other, 0));

        // an anchor method the agent did not name: an invocation sequence, no context
        at = ring.getLong(Probe.WRITE);
        Probe.anchorEnter(PLAIN);
        Probe.condEnter(CALLEE);
        Probe.condExit(CALLEE);
        Probe.anchorExit(PLAIN);
        check(kinds(records(ring, at)).equals(Probe.SEG_BEGIN + "," + Probe.SEG_TRACE + ",1,2"),
              "unnamed anchor records itself only: " + kinds(records(ring, at)));

        // a condition on the request: no request (not an HTTP transaction), no context
        Probe.setAnchors(new Probe.Anchor[] {new Probe.Anchor(ANCHOR, DIAG, new int[] {Probe.COND_HTTP_METHOD},
                new String[] {""}, new String[] {"POST"})});
        at = ring.getLong(Probe.WRITE);
        Probe.anchorEnter(ANCHOR);
        Probe.condEnter(CALLEE);
        Probe.condExit(CALLEE);
        Probe.anchorExit(ANCHOR);
        check(kinds(records(ring, at)).equals(Probe.SEG_BEGIN + "," + Probe.SEG_TRACE + ",1,2"),
              "unmet condition opens no context: " + kinds(records(ring, at)));

        // the diagnosis removed while a call runs inside it: the context closes at its anchor
        Probe.setAnchors(new Probe.Anchor[] {anchor(ANCHOR, DIAG)});
        at = ring.getLong(Probe.WRITE);
        Probe.anchorEnter(ANCHOR);
        Probe.setAnchors(null);
        Probe.condEnter(CALLEE);
        Probe.condExit(CALLEE);
        Probe.anchorExit(ANCHOR);
        Probe.condEnter(CALLEE);
        Probe.condExit(CALLEE);
        check(kinds(records(ring, at)).equals(Probe.SEG_BEGIN + "," + Probe.SEG_TRACE + ",1,8,1,2,9,2"),
              "removed meanwhile: " + kinds(records(ring, at)));

        // arg:N: the anchor's argument, when it is a value whose text the JDK defines
        Probe.setAnchors(new Probe.Anchor[] {new Probe.Anchor(ANCHOR, DIAG, new int[] {Probe.COND_ARGUMENT},
                new String[] {"0"}, new String[] {"42*"})});
        Object[][] cases = {{"4217", true}, {"x42", false}, {4217L, true}, {Integer.valueOf(7), false},
                {Thread.State.NEW, false}, {null, false}, {new Object() {
                    @Override
                    public String toString() {
                        return "42"; // application code: never called by the probe
                    }
                }, false}};
        for (Object[] c : cases) {
            at = ring.getLong(Probe.WRITE);
            Probe.anchorEnterArg(c[0], ANCHOR);
            Probe.condEnter(CALLEE);
            Probe.condExit(CALLEE);
            Probe.anchorExit(ANCHOR);
            boolean recorded = kinds(records(ring, at)).contains(",8,");
            check(recorded == (Boolean) c[1], "arg " + c[0] + ": context " + recorded);
        }
        check("NEW".equals(Probe.argumentText(Thread.State.NEW)) && "1.5".equals(Probe.argumentText(1.5))
                && Probe.argumentText(new StringBuilder("x")) == null, "argument texts");
        Probe.setAnchors(null);

        // transaction data: a value in 16-byte chunks, cut at DATA_MAX on a character's start
        ByteBuffer db = ByteBuffer.allocateDirect(Probe.HEADER + RECORDS * Probe.RECORD).order(ByteOrder.LITTLE_ENDIAN);
        Probe.Ring dr = new Probe.Ring(db);
        Probe.data(dr, Probe.DATA_HTTP_METHOD, "GET");
        List<Rec> d = records(db, 0);
        check(d.size() == 1 && d.get(0).kind == Probe.DATA && d.get(0).aux == (Probe.DATA_HTTP_METHOD << 24 | 3)
                && d.get(0).id == ('G' | 'E' << 8 | 'T' << 16), "one chunk: " + d);
        String path = "/checkout/0123456789/abcdefghij/x"; // 33 bytes: 3 chunks
        Probe.data(dr, Probe.DATA_HTTP_PATH, path);
        d = records(db, 1);
        check(d.size() == 3 && d.get(2).aux == (Probe.DATA_HTTP_PATH << 24 | 2 << 16 | 33), "three chunks: " + d);
        StringBuilder longer = new StringBuilder();
        for (int i = 0; i < 255; i++)
            longer.append('a');
        longer.append('\u00e9'); // 2 bytes across the 256-byte cut
        Probe.data(dr, Probe.DATA_HTTP_PATH, longer.toString());
        d = records(db, 4);
        check(d.size() == 16 && (d.get(15).aux & 0xFFFF) == 255, "cut before a split character: " + d.size() + " "
                + (d.isEmpty() ? "" : Integer.toString(d.get(d.size() - 1).aux & 0xFFFF)));
        Probe.data(dr, Probe.DATA_HTTP_STATUS, null);
        check(records(db, 20).isEmpty(), "no value, no record");

        if (failures > 0) {
            System.err.println(failures + " failure(s)");
            System.exit(1);
        }
        System.out.println("ProbeDiagnosisTest: all checks passed");
    }
}
