package trace;

import java.net.HttpURLConnection;
import java.net.URI;
import java.net.URL;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;

/** run(url): one GET with HttpURLConnection, then one with java.net.http.HttpClient. */
public class Client {
    public static String run(String url) throws Exception {
        return viaUrlConnection(url) + " " + viaHttpClient(url);
    }

    static int viaUrlConnection(String url) throws Exception {
        HttpURLConnection c = (HttpURLConnection) new URL(url + "?client=urlconnection").openConnection();
        int code = c.getResponseCode();
        c.getInputStream().readAllBytes();
        c.disconnect();
        return code;
    }

    static int viaHttpClient(String url) throws Exception {
        HttpClient client = HttpClient.newHttpClient();
        HttpRequest req = HttpRequest.newBuilder(URI.create(url + "?client=httpclient")).GET().build();
        return client.send(req, HttpResponse.BodyHandlers.ofString()).statusCode();
    }
}
