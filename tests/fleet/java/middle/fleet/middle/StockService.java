package fleet.middle;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import javax.servlet.http.HttpServlet;
import javax.servlet.http.HttpServletRequest;
import javax.servlet.http.HttpServletResponse;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.servlet.ServletContextHandler;

/** The fleet's middle (Jetty 9, the second JVM): GET /stock/check?id=N reads the order's
 *  parts from PostgreSQL (through HikariCP), then prices the parts in parallel (a virtual
 *  thread each on JDK 21+, else a pool of platform threads), each a GET to the price service (the JDK's HttpServer, the third JVM) with
 *  Apache HttpClient 4, and answers "parts P, total T".
 *
 *    java fleet.middle.StockService PORT_FILE JDBC_URL PRICE_URL
 *  (binds a free loopback port, writes it to PORT_FILE, serves until stopped) */
public class StockService {
    static com.zaxxer.hikari.HikariDataSource db;
    static org.apache.http.impl.client.CloseableHttpClient http;
    static ExecutorService pricing;
    static String priceUrl;

    public static void main(String[] args) throws Exception {
        priceUrl = args[2];
        db = new com.zaxxer.hikari.HikariDataSource();
        db.setJdbcUrl(args[1]);
        db.setMaximumPoolSize(4);
        try (Connection c = db.getConnection(); Statement st = c.createStatement()) {
            st.execute("create table if not exists parts(order_id int, part int)");
            st.execute("delete from parts");
            for (int o = 0; o < 10; o++)
                for (int p = 0; p < 3; p++)
                    st.execute("insert into parts values (" + o + ", " + (o * 10 + p) + ")");
        }
        org.apache.http.impl.conn.PoolingHttpClientConnectionManager cm =
                new org.apache.http.impl.conn.PoolingHttpClientConnectionManager();
        cm.setMaxTotal(64);
        cm.setDefaultMaxPerRoute(64);
        http = org.apache.http.impl.client.HttpClients.custom().setConnectionManager(cm).build();
        pricing = pricingExecutor();

        Server server = new Server();
        ServerConnector connector = new ServerConnector(server);
        connector.setHost("127.0.0.1");
        connector.setPort(0);
        server.addConnector(connector);
        ServletContextHandler context = new ServletContextHandler();
        context.setContextPath("/stock");
        context.addServlet(CheckServlet.class, "/check");
        server.setHandler(context);
        server.start();
        Path tmp = Path.of(args[0] + ".tmp");
        Files.writeString(tmp, Integer.toString(connector.getLocalPort()));
        Files.move(tmp, Path.of(args[0]));
        server.join();
    }

    /** The pricing fan-out's executor: a virtual thread per task where the JDK has them (21+;
     *  by reflection, the services compile for 17), else a pool of 8 platform threads. */
    static ExecutorService pricingExecutor() {
        try {
            return (ExecutorService) Executors.class.getMethod("newVirtualThreadPerTaskExecutor").invoke(null);
        } catch (ReflectiveOperationException e) {
            return Executors.newFixedThreadPool(8, r -> new Thread(r, "pricing"));
        }
    }

    public static class CheckServlet extends HttpServlet {
        private static final long serialVersionUID = 1L;

        @Override
        protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            int order = Integer.parseInt(req.getParameter("id")) % 10;
            try {
                List<Integer> parts = Parts.of(order);
                long total = Pricing.total(parts);
                resp.setContentType("text/plain");
                resp.getWriter().print("parts " + parts.size() + ", total " + total);
            } catch (Exception e) {
                resp.sendError(500, e.toString());
            }
        }
    }

    static class Parts {
        static List<Integer> of(int order) throws SQLException {
            List<Integer> out = new ArrayList<>();
            try (Connection c = db.getConnection();
                 PreparedStatement ps = c.prepareStatement("select part from parts where order_id = ? order by part")) {
                ps.setInt(1, order);
                try (ResultSet rs = ps.executeQuery()) {
                    while (rs.next())
                        out.add(rs.getInt(1));
                }
            }
            return out;
        }
    }

    static class Pricing {
        static long total(List<Integer> parts) throws Exception {
            List<Future<Long>> prices = new ArrayList<>();
            for (int part : parts)
                prices.add(pricing.submit(() -> price(part)));
            long total = 0;
            for (Future<Long> f : prices)
                total += f.get();
            return total;
        }

        static long price(int part) throws IOException {
            try (org.apache.http.client.methods.CloseableHttpResponse r =
                         http.execute(new org.apache.http.client.methods.HttpGet(priceUrl + "?part=" + part))) {
                return Long.parseLong(org.apache.http.util.EntityUtils.toString(r.getEntity()).trim());
            }
        }
    }
}
