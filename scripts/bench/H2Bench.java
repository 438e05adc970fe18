import java.sql.*;

/* The database workload of scripts/bench-agent-h2.sh: H2 in memory, three tables, batched
 * inserts, point reads, joins and aggregates. A warm-up round loads every class the
 * workload uses; then the program waits WAIT_MS (the agent's classes are redefined
 * meanwhile), runs untimed rounds for SETTLE_MS (the overhead budget judges the JVM under
 * load meanwhile) and times ROUNDS rounds of the same work.
 * Prints "timed_start" when the timed rounds start, then
 * "warmup_ms=... settle_rounds=... work_ms=... best_round_ms=... checksum=..." (work_ms: the
 * timed rounds; best_round_ms: the quickest of them, which a late recompilation or a
 * redefinition landing in one round does not move). */
public class H2Bench {
    static long round(Connection c, int rows, int seed) throws SQLException {
        long sum = 0;
        try (Statement s = c.createStatement()) {
            s.execute("DROP TABLE IF EXISTS item; DROP TABLE IF EXISTS orders; DROP TABLE IF EXISTS customer");
            s.execute("CREATE TABLE customer(id INT PRIMARY KEY, name VARCHAR(40), city VARCHAR(20))");
            s.execute("CREATE TABLE orders(id INT PRIMARY KEY, customer INT, odate DATE, total DECIMAL(12,2))");
            s.execute("CREATE TABLE item(order_id INT, line INT, sku VARCHAR(16), qty INT, price DECIMAL(10,2),"
                      + " PRIMARY KEY(order_id, line))");
            s.execute("CREATE INDEX orders_customer ON orders(customer)");
        }
        int customers = rows / 10;
        try (PreparedStatement p = c.prepareStatement("INSERT INTO customer VALUES(?, ?, ?)")) {
            for (int i = 0; i < customers; i++) {
                p.setInt(1, i);
                p.setString(2, "customer-" + i);
                p.setString(3, "city-" + (i * 7 + seed) % 23);
                p.addBatch();
            }
            p.executeBatch();
        }
        try (PreparedStatement o = c.prepareStatement("INSERT INTO orders VALUES(?, ?, DATEADD('DAY', ?, DATE '2024-01-01'), ?)");
             PreparedStatement it = c.prepareStatement("INSERT INTO item VALUES(?, ?, ?, ?, ?)")) {
            for (int i = 0; i < rows; i++) {
                o.setInt(1, i);
                o.setInt(2, (i * 31 + seed) % customers);
                o.setInt(3, i % 365);
                o.setBigDecimal(4, java.math.BigDecimal.valueOf((i * 17L) % 10000, 2));
                o.addBatch();
                for (int l = 0; l < 3; l++) {
                    it.setInt(1, i);
                    it.setInt(2, l);
                    it.setString(3, "sku-" + (i + l) % 500);
                    it.setInt(4, 1 + (i + l) % 5);
                    it.setBigDecimal(5, java.math.BigDecimal.valueOf((i * 13L + l) % 5000, 2));
                    it.addBatch();
                }
                if (i % 500 == 499) {
                    o.executeBatch();
                    it.executeBatch();
                }
            }
            o.executeBatch();
            it.executeBatch();
        }
        try (PreparedStatement q = c.prepareStatement("SELECT name, city FROM customer WHERE id = ?")) {
            for (int i = 0; i < rows; i++) {
                q.setInt(1, (i * 7) % customers);
                try (ResultSet r = q.executeQuery()) {
                    if (r.next())
                        sum += r.getString(1).length() + r.getString(2).length();
                }
            }
        }
        String[] queries = {
            "SELECT c.city, COUNT(*), SUM(i.qty * i.price) FROM customer c JOIN orders o ON o.customer = c.id"
                + " JOIN item i ON i.order_id = o.id GROUP BY c.city ORDER BY 3 DESC",
            "SELECT i.sku, SUM(i.qty), AVG(i.price) FROM item i GROUP BY i.sku HAVING SUM(i.qty) > 10 ORDER BY 2 DESC LIMIT 20",
            "SELECT MONTH(o.odate), COUNT(DISTINCT o.customer), MAX(o.total) FROM orders o GROUP BY MONTH(o.odate)",
            "SELECT c.name, t.n FROM customer c JOIN (SELECT customer, COUNT(*) n FROM orders GROUP BY customer) t"
                + " ON t.customer = c.id WHERE t.n > 5 ORDER BY t.n DESC, c.name LIMIT 50",
        };
        try (Statement s = c.createStatement()) {
            for (String sql : queries)
                try (ResultSet r = s.executeQuery(sql)) {
                    int cols = r.getMetaData().getColumnCount();
                    while (r.next())
                        for (int k = 1; k <= cols; k++)
                            sum += String.valueOf(r.getObject(k)).length();
                }
            s.execute("UPDATE orders SET total = total + 1 WHERE MOD(id, 10) = 0");
            s.execute("DELETE FROM item WHERE qty = 5");
        }
        return sum;
    }

    public static void main(String[] a) throws Exception {
        int rows = Integer.parseInt(a[0]), rounds = Integer.parseInt(a[1]);
        long waitMs = Long.parseLong(a[2]), settleMs = a.length > 3 ? Long.parseLong(a[3]) : 0;
        try (Connection c = DriverManager.getConnection("jdbc:h2:mem:bench;DB_CLOSE_DELAY=-1", "sa", "")) {
            long t0 = System.nanoTime();
            long sum = round(c, rows, 0);
            long warm = System.nanoTime() - t0;
            Thread.sleep(waitMs); /* the agent's redefinitions arrive meanwhile */
            int settled = 0;
            for (long end = System.nanoTime() + settleMs * 1000000; System.nanoTime() < end; settled++)
                sum += round(c, rows, 100 + settled);
            System.out.println("timed_start"); /* scripts/bench-agent-h2.sh PROFILE= starts perf here */
            System.out.flush();
            long t1 = System.nanoTime(), best = Long.MAX_VALUE;
            for (int i = 1; i <= rounds; i++) {
                long r0 = System.nanoTime();
                sum += round(c, rows, i);
                best = Math.min(best, System.nanoTime() - r0);
            }
            long work = System.nanoTime() - t1;
            System.out.printf("warmup_ms=%d settle_rounds=%d work_ms=%d best_round_ms=%d checksum=%d%n", warm / 1000000,
                              settled, work / 1000000, best / 1000000, sum);
        }
    }
}
