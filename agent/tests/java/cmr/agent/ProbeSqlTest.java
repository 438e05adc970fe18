/*
 * ProbeSqlTest - the probe's side of JDBC (Probe.sqlEnter and friends, the instrumenter's
 * JDBC rules), without the agent: the calling thread records into a ring over a direct
 * buffer. Checks what lands in the ring: a JDBC call inside a trace is a call record of
 * its own followed by its SQL as DATA of key NODE_DB_STATEMENT, whole; the SQL of a
 * statement prepared anywhere (outside a trace too) is found through the statement; a
 * JDBC call inside another (a pool's proxy calling the driver) adds nothing; outside a
 * trace nothing is recorded; an exception exit pairs like a normal one. Exits 1 on the
 * first failure.
 */
package cmr.agent;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

public final class ProbeSqlTest {
    private static int failures;

    private static void check(boolean ok, String what) {
        if (!ok) {
            System.err.println("FAIL: " + what);
            failures++;
        }
    }

    static final int RECORDS = 1024;

    /** Kinds of the records written since `from`. */
    static List<Integer> kinds(ByteBuffer b, long from) {
        List<Integer> out = new ArrayList<>();
        for (long i = from; i < b.getLong(Probe.WRITE); i++)
            out.add((int) b.getLong(Probe.HEADER + (int) i * Probe.RECORD + 16));
        return out;
    }

    /** The value of the DATA records of `key` written since `from`, put back together. */
    static String data(ByteBuffer b, long from, int key) {
        byte[] v = null;
        for (long i = from; i < b.getLong(Probe.WRITE); i++) {
            int off = Probe.HEADER + (int) i * Probe.RECORD;
            long kindAux = b.getLong(off + 16);
            int aux = (int) (kindAux >>> 32);
            if ((int) kindAux != Probe.DATA || (aux >>> 24) != key)
                continue;
            int chunk = (aux >>> 16) & 0xff, len = aux & 0xffff;
            if (v == null)
                v = new byte[len];
            for (int k = 0; k < 16 && chunk * 16 + k < len; k++)
                v[chunk * 16 + k] = b.get(off + (k < 8 ? k : 8 + (k - 8)));
        }
        return v == null ? null : new String(v, StandardCharsets.UTF_8);
    }

    public static void main(String[] args) {
        ByteBuffer ring = ByteBuffer.allocateDirect(Probe.HEADER + RECORDS * Probe.RECORD).order(ByteOrder.LITTLE_ENDIAN);
        Probe.testRing(ring);
        long ROOT = 0x1, EXEC = 0xE, INNER = 0xF, PREP = 0xA;
        Object prepared = new Object(), proxy = new Object(), unknown = new Object();
        String sql = "select a, b from orders where customer = ? and note = 'ünïcode, longer than sixteen bytes'";

        // db.system: the JDBC URL's subprotocol; an object that is no statement has none
        check("postgresql".equals(Probe.jdbcSubprotocol("jdbc:postgresql://127.0.0.1:5432/db")), "postgresql");
        check("h2".equals(Probe.jdbcSubprotocol("JDBC:H2:mem:test")), "h2, any case");
        check("sqlserver".equals(Probe.jdbcSubprotocol("jdbc:sqlserver://h;databaseName=x")), "sqlserver");
        check(Probe.jdbcSubprotocol("jdbc:") == null && Probe.jdbcSubprotocol("postgresql://h") == null
                      && Probe.jdbcSubprotocol(null) == null && Probe.jdbcSubprotocol("jdbc:a b:x") == null,
              "no subprotocol");
        check(Probe.dbSystem(new Object()) == null && Probe.dbSystem("select 1") == null, "no statement");

        // prepared outside any trace (a statement cache filled at start-up): bound, nothing recorded
        long at = ring.getLong(Probe.WRITE);
        Probe.sqlPrepare(sql, PREP);
        Probe.sqlBind(prepared, PREP);
        Probe.sqlBind(proxy, PREP); // a pool's proxy made inside the same prepare
        Probe.sqlPrepared(PREP);
        Probe.sqlBind(unknown, PREP); // made outside a prepare: no SQL
        check(kinds(ring, at).isEmpty(), "no record for a prepare: " + kinds(ring, at));

        // outside a trace: a JDBC call records nothing
        Probe.sqlEnterText(new Object(), "delete from t", EXEC);
        Probe.sqlExit(EXEC);
        check(kinds(ring, at).isEmpty(), "no record outside a trace: " + kinds(ring, at));

        // inside: the proxy's execute is the node, with the statement's SQL; the driver's
        // execute it calls adds nothing
        Probe.enter(ROOT);
        at = ring.getLong(Probe.WRITE);
        Probe.sqlEnter(proxy, EXEC);
        Probe.sqlEnter(prepared, INNER);
        Probe.sqlExit(INNER);
        Probe.sqlExit(EXEC);
        List<Integer> k = kinds(ring, at);
        int chunks = (sql.getBytes(StandardCharsets.UTF_8).length + 15) / 16;
        check(k.size() == 2 + chunks && k.get(0) == Probe.ENTER && k.get(k.size() - 1) == Probe.EXIT,
                "one node with its SQL: " + k);
        check(sql.equals(data(ring, at, Probe.NODE_DB_STATEMENT)), "the SQL: " + data(ring, at, Probe.NODE_DB_STATEMENT));

        // SQL given as the argument (Statement.execute(String)); an exception exit
        at = ring.getLong(Probe.WRITE);
        Probe.sqlEnterText(new Object(), "update t set a = 1", EXEC);
        Probe.sqlExitThrow(EXEC);
        k = kinds(ring, at);
        check(k.equals(List.of(Probe.ENTER, Probe.DATA, Probe.DATA, Probe.EXIT_THROW)), "update (2 chunks): " + k);
        check("update t set a = 1".equals(data(ring, at, Probe.NODE_DB_STATEMENT)), "the update's SQL");

        // a statement whose SQL is not known: the node without it
        at = ring.getLong(Probe.WRITE);
        Probe.sqlEnter(unknown, EXEC);
        Probe.sqlExit(EXEC);
        check(kinds(ring, at).equals(List.of(Probe.ENTER, Probe.EXIT)), "unknown SQL: " + kinds(ring, at));

        // a very long statement: cut at NODE_DATA_MAX bytes
        StringBuilder big = new StringBuilder("select ");
        while (big.length() < 3 * Probe.NODE_DATA_MAX)
            big.append("column_name, ");
        at = ring.getLong(Probe.WRITE);
        Probe.sqlEnterText(new Object(), big.toString(), EXEC);
        Probe.sqlExit(EXEC);
        String cut = data(ring, at, Probe.NODE_DB_STATEMENT);
        check(cut != null && cut.length() == Probe.NODE_DATA_MAX && big.toString().startsWith(cut), "cut SQL");
        Probe.exit(ROOT);

        // after the trace: nothing again
        at = ring.getLong(Probe.WRITE);
        Probe.sqlEnter(prepared, EXEC);
        Probe.sqlExit(EXEC);
        check(kinds(ring, at).isEmpty(), "no record after the trace: " + kinds(ring, at));
        if (failures > 0)
            System.exit(1);
        System.out.println("ProbeSqlTest: ok");
    }
}
