package fleet.back;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.Executors;

/** The fleet's back (the JDK's HttpServer, the third JVM): GET /price?part=N answers the
 *  part's price after about 1 ms of work.
 *
 *    java fleet.back.PriceService PORT_FILE   (binds a free loopback port, writes it to
 *                                             PORT_FILE, serves until stopped) */
public class PriceService {
    public static void main(String[] args) throws Exception {
        System.setProperty("sun.net.httpserver.nodelay", "true");
        HttpServer server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 128);
        server.createContext("/price", PriceService::handle);
        server.setExecutor(Executors.newFixedThreadPool(8, r -> new Thread(r, "price-worker")));
        server.start();
        Path tmp = Path.of(args[0] + ".tmp");
        Files.writeString(tmp, Integer.toString(server.getAddress().getPort()));
        Files.move(tmp, Path.of(args[0]));
    }

    static void handle(HttpExchange ex) throws IOException {
        String q = ex.getRequestURI().getQuery();
        int part = q != null && q.startsWith("part=") ? Integer.parseInt(q.substring(5)) : 0;
        byte[] body = Long.toString(Catalog.price(part)).getBytes(StandardCharsets.UTF_8);
        ex.sendResponseHeaders(200, body.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(body);
        }
    }

    static class Catalog {
        static long price(int part) {
            long until = System.nanoTime() + 1_000_000, x = part;
            while (System.nanoTime() < until)
                x = x * 6364136223846793005L + 1442695040888963407L;
            return 100 + (x & 0xff);
        }
    }
}
