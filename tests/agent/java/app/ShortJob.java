/*
 * ShortJob - a short-lived JVM on a real library: an in-memory H2 database (Debian's
 * h2.jar on the class path) through JDBC, for about RUN_MS milliseconds (default 1000)
 * counted from the JVM's start. It creates a table, inserts, queries and updates rows in a
 * loop, so that a few hundred org.h2 classes are loaded within its first half second, then
 * runs the same statements until its time is up, and prints one line:
 *
 *   shortjob: rounds=N rows=M elapsed_ms=T
 *
 * Used by the time-to-first-instrumented-call benchmark (scripts/bench-first-call.sh) and
 * the 1-second JVM test (tests/e2e/test_e2e_short_jvm.c).
 *   java -cp CLASSES:/usr/share/java/h2.jar ShortJob [RUN_MS]
 */
import java.lang.management.ManagementFactory;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;

public class ShortJob {
    public static void main(String[] args) throws Exception {
        long runMs = args.length > 0 ? Long.parseLong(args[0]) : 1000;
        long start = ManagementFactory.getRuntimeMXBean().getStartTime();
        long rounds = 0, rows = 0;
        try (Connection c = DriverManager.getConnection("jdbc:h2:mem:shortjob;DB_CLOSE_DELAY=-1", "sa", "")) {
            try (Statement s = c.createStatement()) {
                s.execute("CREATE TABLE item(id INT PRIMARY KEY, name VARCHAR(64), price DECIMAL(10,2), qty INT)");
                s.execute("CREATE INDEX item_name ON item(name)");
            }
            do {
                try (PreparedStatement ins = c.prepareStatement("MERGE INTO item KEY(id) VALUES(?, ?, ?, ?)")) {
                    for (int i = 0; i < 200; i++) {
                        ins.setInt(1, (int) (rounds * 200 + i) % 5000);
                        ins.setString(2, "item-" + (i % 37));
                        ins.setBigDecimal(3, java.math.BigDecimal.valueOf(i * 7 % 1000, 2));
                        ins.setInt(4, i % 11);
                        ins.executeUpdate();
                    }
                }
                try (Statement s = c.createStatement();
                     ResultSet r = s.executeQuery(
                         "SELECT name, COUNT(*), SUM(price * qty), MAX(id) FROM item WHERE qty > 2 GROUP BY name ORDER BY 3 DESC")) {
                    while (r.next())
                        rows++;
                }
                try (PreparedStatement up = c.prepareStatement("UPDATE item SET qty = qty + 1 WHERE name = ?")) {
                    up.setString(1, "item-" + (rounds % 37));
                    up.executeUpdate();
                }
                rounds++;
            } while (System.currentTimeMillis() - start < runMs);
        }
        System.out.println("shortjob: rounds=" + rounds + " rows=" + rows + " elapsed_ms=" + (System.currentTimeMillis() - start));
    }
}
