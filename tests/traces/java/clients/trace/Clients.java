package trace;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

/** run(url): one GET of url (Tomcat's servlet in the trace tests) with each HTTP client
 *  library of the class path: Apache HttpClient 4, Apache HttpClient 5, OkHttp 3
 *  synchronously, then OkHttp 3 asynchronously (enqueue: the call runs on OkHttp's
 *  dispatcher threads, the caller waits for its callback). Returns the four status codes.
 *  Compiled only where Debian's libhttpclient-java, libhttpclient5-java and libokhttp-java
 *  are installed (tests/traces/CMakeLists.txt). */
public class Clients {
    private static org.apache.http.impl.client.CloseableHttpClient apache4;
    private static org.apache.hc.client5.http.impl.classic.CloseableHttpClient apache5;
    private static okhttp3.OkHttpClient okhttp;

    public static String run(String url) throws Exception {
        clients();
        return apache4(url) + " " + apache5(url) + " " + okhttpSync(url) + " " + okhttpAsync(url);
    }

    /** jetty(url): one GET with Apache HttpClient 4 (the jetty scenario: url is Jetty's). */
    public static int jetty(String url) throws Exception {
        clients();
        return apache4(url);
    }

    private static synchronized void clients() {
        if (apache4 == null) {
            apache4 = org.apache.http.impl.client.HttpClients.createDefault();
            apache5 = org.apache.hc.client5.http.impl.classic.HttpClients.createDefault();
            okhttp = new okhttp3.OkHttpClient();
        }
    }

    static int apache4(String url) throws Exception {
        try (org.apache.http.client.methods.CloseableHttpResponse r =
                     apache4.execute(new org.apache.http.client.methods.HttpGet(url + "?client=apache4&token=s3cret"))) {
            org.apache.http.util.EntityUtils.consume(r.getEntity());
            return r.getStatusLine().getStatusCode();
        }
    }

    @SuppressWarnings("deprecation") // execute(request): the classic API every 5.x user has
    static int apache5(String url) throws Exception {
        try (org.apache.hc.client5.http.impl.classic.CloseableHttpResponse r =
                     apache5.execute(new org.apache.hc.client5.http.classic.methods.HttpGet(url + "?client=apache5"))) {
            org.apache.hc.core5.http.io.entity.EntityUtils.consume(r.getEntity());
            return r.getCode();
        }
    }

    static int okhttpSync(String url) throws Exception {
        okhttp3.Request req = new okhttp3.Request.Builder().url(url + "?client=okhttp").build();
        try (okhttp3.Response r = okhttp.newCall(req).execute()) {
            r.body().string();
            return r.code();
        }
    }

    static int okhttpAsync(String url) throws Exception {
        okhttp3.Request req = new okhttp3.Request.Builder().url(url + "?client=okhttp-async").build();
        CompletableFuture<Integer> done = new CompletableFuture<>();
        okhttp.newCall(req).enqueue(new okhttp3.Callback() {
            @Override
            public void onFailure(okhttp3.Call call, java.io.IOException e) {
                done.completeExceptionally(e);
            }

            @Override
            public void onResponse(okhttp3.Call call, okhttp3.Response r) throws java.io.IOException {
                try (okhttp3.Response body = r) {
                    body.body().string();
                    done.complete(body.code());
                }
            }
        });
        return done.get(30, TimeUnit.SECONDS);
    }
}
