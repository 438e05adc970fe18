package trace.web;

import jakarta.servlet.AsyncContext;
import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;

/** GET /orders/async: doGet starts async processing and returns; the container runs the
 *  rest on another of its threads (AsyncContext.start): Inventory.check, then the answer
 *  (202, "async N") and complete(). With ?abandon=1 nothing completes it: the container
 *  times it out after 300 ms and answers with an error itself. */
public class AsyncOrderServlet extends HttpServlet {
    private static final long serialVersionUID = 1L;

    @Override
    protected void doGet(HttpServletRequest req, HttpServletResponse resp) {
        AsyncContext ctx = req.startAsync();
        if (req.getParameter("abandon") != null) { // never completed: the container times it out
            ctx.setTimeout(300);
            return;
        }
        ctx.start(() -> {
            try {
                long n = Inventory.check("async");
                resp.setStatus(202); // accepted: only the completion tells
                resp.setContentType("text/plain");
                resp.getWriter().print("async " + n);
            } catch (java.io.IOException e) {
                resp.setStatus(500);
            } finally {
                ctx.complete();
            }
        });
    }
}
