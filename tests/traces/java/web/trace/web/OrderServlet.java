package trace.web;

import jakarta.servlet.http.HttpServlet;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletResponse;
import java.io.IOException;

/** GET /orders/check: doGet -> Inventory.check -> Inventory.lookup; answers "ok N". With
 *  ?moved=1 it answers a redirect (302) to /orders/check?client=redirected instead. */
public class OrderServlet extends HttpServlet {
    @Override
    protected void doGet(HttpServletRequest req, HttpServletResponse resp) throws IOException {
        if (req.getParameter("moved") != null) {
            resp.sendRedirect("check?client=redirected");
            return;
        }
        long n = Inventory.check(req.getParameter("client"));
        resp.setContentType("text/plain");
        resp.getWriter().print("ok " + n);
    }
}
