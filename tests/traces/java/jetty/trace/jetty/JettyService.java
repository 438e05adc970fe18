package trace.jetty;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import javax.servlet.AsyncContext;
import javax.servlet.http.HttpServlet;
import javax.servlet.http.HttpServletRequest;
import javax.servlet.http.HttpServletResponse;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import org.eclipse.jetty.servlet.ServletContextHandler;

/** The trace tests' Jetty 9 service (a third JVM): GET /stock/check answers "stock N"
 *  through StockServlet.doGet -> Stock.level (javax.servlet, as Jetty 9 has it); GET
 *  /stock/async the same with async processing: AsyncStockServlet.doGet starts it and
 *  returns, Jetty's pool runs the rest (AsyncContext.start), which completes it.
 *
 *    java trace.jetty.JettyService PORT_FILE   (binds a free loopback port, writes it to
 *                                              PORT_FILE, serves until the JVM is stopped;
 *                                              once PORT_FILE.late exists, a second server
 *                                              too, its port in PORT_FILE.late-port)
 *  Compiled only where Debian's libjetty9-java is installed (tests/traces/CMakeLists.txt). */
public class JettyService {
    public static void main(String[] args) throws Exception {
        Server server = serve(args[0]);
        Path trigger = Path.of(args[0] + ".late");
        while (!Files.exists(trigger))
            Thread.sleep(50);
        startLate(args[0] + ".late-port");
        server.join();
    }

    /** A second server, started once the test asks (PORT_FILE.late appears) by a call that
     *  is recorded, a trace root: its pool's jobs (selector, acceptor, reserved threads) are
     *  queued inside that trace, and run for the server's life. A request they serve must
     *  not continue it (the jetty_late scenario). */
    static void startLate(String portFile) throws Exception {
        serve(portFile);
    }

    /** A started server with the service's servlets; its port written to portFile. */
    static Server serve(String portFile) throws Exception {
        Server server = new Server();
        ServerConnector http = new ServerConnector(server);
        http.setHost("127.0.0.1");
        http.setPort(0);
        server.addConnector(http);
        ServletContextHandler context = new ServletContextHandler();
        context.setContextPath("/stock");
        context.addServlet(StockServlet.class, "/check");
        context.addServlet(StockServlet.class, "/level/*");
        context.addServlet(AsyncStockServlet.class, "/async").setAsyncSupported(true);
        server.setHandler(context);
        server.start();
        Path tmp = Path.of(portFile + ".tmp");
        Files.writeString(tmp, Integer.toString(http.getLocalPort()));
        Files.move(tmp, Path.of(portFile));
        return server;
    }

    public static class StockServlet extends HttpServlet {
        private static final long serialVersionUID = 1L;

        @Override
        protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            long n = Stock.level(req.getParameter("item"));
            resp.setContentType("text/plain");
            resp.getWriter().print("stock " + n);
        }
    }

    public static class AsyncStockServlet extends HttpServlet {
        private static final long serialVersionUID = 1L;

        @Override
        protected void doGet(HttpServletRequest req, HttpServletResponse resp) {
            AsyncContext ctx = req.startAsync();
            ctx.start(() -> {
                try {
                    long n = Stock.level("async");
                    resp.setStatus(202); // accepted: only the completion tells
                    resp.setContentType("text/plain");
                    resp.getWriter().print("async " + n);
                } catch (IOException e) {
                    resp.setStatus(500);
                } finally {
                    ctx.complete();
                }
            });
        }
    }

    static class Stock {
        static long level(String item) {
            long until = System.nanoTime() + 1_000_000, x = item == null ? 7 : item.hashCode();
            while (System.nanoTime() < until)
                x = x * 6364136223846793005L + 1442695040888963407L;
            return x & 0xff;
        }
    }
}
