package fleet.front;

import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;

/** The fleet's front (Tomcat 10): GET /front/order?id=N checks the order, asks the stock
 *  service (Jetty, the second JVM) with OkHttp, and answers "order N: <stock's answer>".
 *  The stock service's address is the system property fleet.stock (set by the test). */
public class FrontServlet extends HttpServlet {
    private static final long serialVersionUID = 1L;
    private static final okhttp3.OkHttpClient HTTP = new okhttp3.OkHttpClient();

    @Override
    protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
        String id = req.getParameter("id");
        Orders.validate(id);
        String stock = Stock.ask(System.getProperty("fleet.stock"), id);
        resp.setContentType("text/plain");
        resp.getWriter().print("order " + id + ": " + stock);
    }

    static class Orders {
        static void validate(String id) {
            if (id == null || id.isEmpty())
                throw new IllegalArgumentException("no order id");
        }
    }

    static class Stock {
        static String ask(String base, String id) throws IOException {
            okhttp3.Request req = new okhttp3.Request.Builder().url(base + "?id=" + id).build();
            try (okhttp3.Response r = HTTP.newCall(req).execute()) {
                if (r.code() != 200)
                    throw new IOException("stock service answered " + r.code());
                return r.body().string();
            }
        }
    }
}
