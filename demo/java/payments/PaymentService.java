/*
 * PaymentService - the demo's second JVM: a payment provider behind the JDK's own HTTP
 * server (jdk.httpserver) on 127.0.0.1. The shop calls GET /charge?order=N&amount=M for
 * every checkout; the answer is "approved" or "declined". Every tenth order goes through a
 * slow bank, so the demo's slowest traces cross from the shop's JVM into this one. Every
 * payment is written to a ledger in an embedded SQL database (H2 in memory, when its jar is
 * on the class path: the traces show the JDBC calls with their SQL, literals masked).
 *
 *   java payments.PaymentService PORT_FILE    (binds a free port, writes it to PORT_FILE,
 *                                              serves until the JVM is stopped)
 */
package payments;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.Executors;

public class PaymentService {
    public static void main(String[] args) throws Exception {
        // answer at once: without TCP_NODELAY a small response waits for the client's
        // delayed ACK (40 ms on Linux), which the shop's traces would show as network time
        System.setProperty("sun.net.httpserver.nodelay", "true");
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 64);
        server.createContext("/charge", PaymentService::handle);
        server.setExecutor(Executors.newFixedThreadPool(4, r -> new Thread(r, "payment-worker")));
        Ledger.open();
        server.start();
        Path tmp = Path.of(args[0] + ".tmp");
        Files.writeString(tmp, Integer.toString(server.getAddress().getPort()));
        Files.move(tmp, Path.of(args[0]));
    }

    static void handle(HttpExchange ex) throws IOException {
        int order = 0;
        long amount = 0;
        String q = ex.getRequestURI().getQuery();
        for (String kv : q == null ? new String[0] : q.split("&")) {
            if (kv.startsWith("order="))
                order = Integer.parseInt(kv.substring(6));
            else if (kv.startsWith("amount="))
                amount = Long.parseLong(kv.substring(7));
        }
        boolean ok = FraudCheck.score(order, amount) < 90 && Bank.authorize(order, amount);
        Ledger.record(order, amount, ok);
        byte[] body = (ok ? "approved" : "declined").getBytes(StandardCharsets.UTF_8);
        ex.sendResponseHeaders(200, body.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(body);
        }
    }

    static void work(long micros) {
        long until = System.nanoTime() + micros * 1000;
        while (System.nanoTime() < until)
            Thread.onSpinWait();
    }
}

class Ledger {
    private static java.sql.Connection db;

    /** The ledger's database, or none (a line on stderr) when no H2 driver is there. */
    static void open() {
        try {
            db = java.sql.DriverManager.getConnection("jdbc:h2:mem:ledger;DB_CLOSE_DELAY=-1");
            try (java.sql.Statement st = db.createStatement()) {
                st.execute("create table payments(id identity, order_id int, amount bigint, approved boolean, "
                        + "at timestamp default current_timestamp)");
            }
        } catch (java.sql.SQLException e) {
            System.err.println("no ledger (H2 not on the class path): " + e.getMessage());
        }
    }

    static void record(int order, long amount, boolean approved) {
        if (db == null)
            return;
        try (java.sql.PreparedStatement ps =
                     db.prepareStatement("insert into payments(order_id, amount, approved) values (?, ?, ?)")) {
            ps.setInt(1, order);
            ps.setLong(2, amount);
            ps.setBoolean(3, approved);
            ps.executeUpdate();
        } catch (java.sql.SQLException e) {
            System.err.println("ledger: " + e.getMessage());
        }
    }
}

class FraudCheck {
    static int score(int order, long amount) {
        PaymentService.work(300);
        return (int) ((order * 7919L + amount) % 100);
    }
}

class Bank {
    static boolean authorize(int order, long amount) {
        // the acquirer's client library: every tenth payment is slow in there
        return acquirer.AcquirerClient.authorize(order, amount);
    }
}
