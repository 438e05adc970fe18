package trace;

import java.net.HttpURLConnection;
import java.net.URI;
import java.net.URL;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;

/** run(url, requests): one GET with HttpURLConnection, then one with java.net.http.HttpClient's
 *  send, then one with its sendAsync, then a send that the server redirects (302) and the
 *  client follows (the requests built beforehand by prepare, outside the trace: the context
 *  is the one of the send).
 *  local(): with HttpURLConnection to a JDK HttpServer in this JVM (its handler:
 *  Client.handle -> Leaf.work, on a thread of the server's pool): a GET, a POST whose body
 *  the application writes first (getOutputStream connects: the request's headers go on
 *  there), and a GET the server answers 404 (getInputStream throws). */
public class Client {
    private static com.sun.net.httpserver.HttpServer server;

    public static String local() throws Exception {
        String url = localUrl();
        return viaUrlConnection(url) + " " + viaUrlConnectionPost(url) + " " + viaUrlConnectionMissing(url);
    }

    static int viaUrlConnectionPost(String url) throws Exception {
        HttpURLConnection c = (HttpURLConnection) new URL(url).openConnection();
        c.setRequestMethod("POST");
        c.setDoOutput(true);
        try (java.io.OutputStream out = c.getOutputStream()) {
            out.write("order=7".getBytes());
        }
        int code = c.getResponseCode();
        c.getInputStream().readAllBytes();
        return code;
    }

    static int viaUrlConnectionMissing(String url) throws Exception {
        HttpURLConnection c = (HttpURLConnection) new URL(url + "/missing").openConnection();
        try {
            c.getInputStream(); // throws: 404
            return 0;
        } catch (java.io.FileNotFoundException e) {
            return c.getResponseCode();
        }
    }

    private static synchronized String localUrl() throws java.io.IOException {
        if (server == null) {
            server = com.sun.net.httpserver.HttpServer.create(new java.net.InetSocketAddress("127.0.0.1", 0), 16);
            server.createContext("/local", Client::handle);
            server.setExecutor(java.util.concurrent.Executors.newFixedThreadPool(2, r -> {
                Thread t = new Thread(r, "trace-server");
                t.setDaemon(true);
                return t;
            }));
            server.start();
        }
        return "http://127.0.0.1:" + server.getAddress().getPort() + "/local";
    }

    static void handle(com.sun.net.httpserver.HttpExchange ex) throws java.io.IOException {
        ex.getRequestBody().readAllBytes();
        byte[] body = ("ok " + (Leaf.work(1) & 0xff)).getBytes();
        ex.sendResponseHeaders(ex.getRequestURI().getPath().endsWith("/missing") ? 404 : 200, body.length);
        try (java.io.OutputStream out = ex.getResponseBody()) {
            out.write(body);
        }
    }

    private static final HttpClient CLIENT = HttpClient.newHttpClient();
    private static final HttpClient FOLLOWING =
            HttpClient.newBuilder().followRedirects(HttpClient.Redirect.NORMAL).build();

    public static HttpRequest[] prepare(String url) {
        return new HttpRequest[] {HttpRequest.newBuilder(URI.create(url + "?client=httpclient")).GET().build(),
                                  HttpRequest.newBuilder(URI.create(url + "?client=async")).GET().build(),
                                  HttpRequest.newBuilder(URI.create(url + "?client=redirect&moved=1")).GET().build()};
    }

    public static String run(String url, HttpRequest[] requests) throws Exception {
        return viaUrlConnection(url) + " " + viaHttpClient(requests[0]) + " " + viaHttpClientAsync(requests[1]) + " "
                + viaHttpClientRedirect(requests[2]);
    }

    static int viaHttpClientRedirect(HttpRequest req) throws Exception {
        return FOLLOWING.send(req, HttpResponse.BodyHandlers.ofString()).statusCode();
    }

    static int viaUrlConnection(String url) throws Exception {
        HttpURLConnection c = (HttpURLConnection) new URL(url + "?client=urlconnection").openConnection();
        int code = c.getResponseCode();
        c.getInputStream().readAllBytes();
        c.disconnect();
        return code;
    }

    static int viaHttpClient(HttpRequest req) throws Exception {
        return CLIENT.send(req, HttpResponse.BodyHandlers.ofString()).statusCode();
    }

    static int viaHttpClientAsync(HttpRequest req) {
        return CLIENT.sendAsync(req, HttpResponse.BodyHandlers.ofString()).join().statusCode();
    }
}
