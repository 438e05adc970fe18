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
 *  returns, Jetty's pool runs the rest (AsyncContext.start), which completes it; GET
 *  /stock/late starts a second server inside the request (StartLateServlet).
 *
 *    java trace.jetty.JettyService PORT_FILE   (binds a free loopback port, writes it to
 *                                              PORT_FILE, serves until the JVM is stopped)
 *  Compiled only where Debian's libjetty9-java is installed (tests/traces/CMakeLists.txt). */
public class JettyService {
    public static void main(String[] args) throws Exception {
        serve(args[0]).join();
    }

    /** GET /stock/late starts a second server (once) and answers its port: code inside a
     *  trace (this request's) that starts a server, whose pool's jobs (selector, acceptor,
     *  reserved threads) are queued inside that trace and run for the server's life. The
     *  request's trace must still complete, and the requests the second server serves must
     *  not continue it (the jetty_late scenario). */
    public static class StartLateServlet extends HttpServlet {
        private static final long serialVersionUID = 1L;
        private static Server late;

        @Override
        protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
            try {
                int port = startLate();
                resp.setContentType("text/plain");
                resp.getWriter().print(port);
            } catch (Exception e) {
                resp.sendError(500, e.toString());
            }
        }

        private static synchronized int startLate() throws Exception {
            if (late == null)
                late = serve(null);
            return ((ServerConnector) late.getConnectors()[0]).getLocalPort();
        }
    }

    /** A started server with the service's servlets; its port written to portFile (when
     *  one is given). */
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
        context.addServlet(StartLateServlet.class, "/late");
        server.setHandler(context);
        server.start();
        if (portFile == null)
            return server;
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
