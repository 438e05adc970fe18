/*
 * TraceApp - the application of the trace tests (tests/traces/test_traces.py). It reads
 * commands on stdin and answers on stdout, one line each; every command runs one scenario
 * whose root method is instrumented, so each command makes one trace:
 *
 *   nested            -> nested: done         trace.Nested.run: calls nested in one thread
 *   pool TASKS        -> pool: tasks=N        trace.Pool.run: ExecutorService.submit
 *   scheduled         -> scheduled: done      trace.Pool.scheduled: a task 5 ms later
 *   timer             -> timer: N             trace.Pool.timer: a java.util.Timer task, 3 runs
 *   thread            -> thread: done         trace.Threads.run: Thread.start + join
 *   vthreads N        -> vthreads: N          trace.Threads.virtuals: N virtual threads (JDK 21+)
 *   vfanout N         -> vfanout: N           trace.Threads.fanout: N tasks on virtual threads
 *   structured N      -> structured: N        trace.Threads.structured: N subtasks forked in a
 *                                             StructuredTaskScope (JDK 21+, --enable-preview)
 *   chain             -> chain: N             trace.Chain.run: CompletableFuture stages
 *   forkjoin N        -> forkjoin: N          trace.Sum.total: a RecursiveTask in a ForkJoinPool
 *   http URL          -> http: CODES      trace.Client.run: HttpURLConnection, then HttpClient
 *                                             (send, sendAsync, a send redirected)
 *   local             -> local: CODE          trace.Client.local: HttpURLConnection into a
 *                                             JDK HttpServer of this JVM
 *   clients URL       -> clients: CODES       trace.Clients.run: GET URL with Apache HttpClient
 *                                             4 and 5 and OkHttp 3 (sync, async); where built
 *   jdbcmany N        -> jdbcmany: ROWS       trace.Db.many: N queries in a row on H2
 *   jetty URL         -> jetty: CODE          trace.Clients.jetty: GET URL (Jetty's servlet)
 *                                             with Apache HttpClient 4
 *   jdbc              -> jdbc: ROWS           trace.Db.run: JDBC on H2 in memory (h2.jar on
 *                                             the class path), an insert prepared before it
 *   pooled URL        -> pooled: ROWS         trace.Db.pooled: JDBC through HikariCP (its jar
 *                                             on the class path) to the database at URL
 *   slow MS           -> slow: started        trace.Slow.run on a thread of its own, MS long
 *   load CLASS...     -> loaded N             Class.forName: the classes load (and get
 *                                             instrumented) before their scenario runs
 *   exit              -> the JVM ends normally
 */
import java.io.BufferedReader;
import java.io.InputStreamReader;

public class TraceApp {
    private static java.sql.Connection db;

    private static javax.sql.DataSource pool;

    /** A HikariCP pool of two connections to url (made by reflection: the class path has
     *  HikariCP only when the test found it), its table made; outside any trace. */
    private static javax.sql.DataSource pool(String url) throws Exception {
        if (pool == null) {
            Class<?> k = Class.forName("com.zaxxer.hikari.HikariDataSource");
            javax.sql.DataSource ds = (javax.sql.DataSource) k.getConstructor().newInstance();
            k.getMethod("setJdbcUrl", String.class).invoke(ds, url);
            k.getMethod("setMaximumPoolSize", int.class).invoke(ds, 2);
            try (java.sql.Connection c = ds.getConnection(); java.sql.Statement st = c.createStatement()) {
                st.execute("create table if not exists orders(id serial, customer varchar(64), amount int)");
            }
            pool = ds;
        }
        return pool;
    }

    /** The insert trace.Db.run executes, prepared here: outside any trace. */
    private static java.sql.PreparedStatement jdbcInsert() throws java.sql.SQLException {
        if (db == null) {
            db = java.sql.DriverManager.getConnection("jdbc:h2:mem:trace;DB_CLOSE_DELAY=-1");
            try (java.sql.Statement st = db.createStatement()) {
                st.execute("create table orders(id identity, customer varchar(64), amount int)");
            }
        }
        return db.prepareStatement("insert into orders(customer, amount) values (?, ?)");
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("ready");
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split("\\s+");
            try {
                switch (w[0]) {
                    case "nested":
                        trace.Nested.run();
                        System.out.println("nested: done");
                        break;
                    case "pool":
                        System.out.println("pool: tasks=" + trace.Pool.run(Integer.parseInt(w[1])));
                        break;
                    case "scheduled":
                        trace.Pool.scheduled();
                        System.out.println("scheduled: done");
                        break;
                    case "timer":
                        System.out.println("timer: " + trace.Pool.timer());
                        break;
                    case "thread":
                        trace.Threads.run();
                        System.out.println("thread: done");
                        break;
                    case "vthreads":
                        System.out.println("vthreads: " + trace.Threads.virtuals(Integer.parseInt(w[1])));
                        break;
                    case "structured":
                        System.out.println("structured: " + trace.Threads.structured(Integer.parseInt(w[1])));
                        break;
                    case "vfanout":
                        System.out.println("vfanout: " + trace.Threads.fanout(Integer.parseInt(w[1])));
                        break;
                    case "chain":
                        System.out.println("chain: " + trace.Chain.run());
                        break;
                    case "forkjoin":
                        System.out.println("forkjoin: " + trace.Sum.total(Integer.parseInt(w[1])));
                        break;
                    case "http":
                        System.out.println("http: " + trace.Client.run(w[1], trace.Client.prepare(w[1])));
                        break;
                    case "local":
                        System.out.println("local: " + trace.Client.local());
                        break;
                    case "clients": // trace.Clients is compiled only where its libraries are
                        System.out.println("clients: "
                                + Class.forName("trace.Clients").getMethod("run", String.class).invoke(null, w[1]));
                        break;
                    case "jetty": // a GET with Apache HttpClient 4 into the Jetty JVM
                        System.out.println("jetty: "
                                + Class.forName("trace.Clients").getMethod("jetty", String.class).invoke(null, w[1]));
                        break;
                    case "pooled":
                        System.out.println("pooled: " + trace.Db.pooled(pool(w[1])));
                        break;
                    case "jdbcmany":
                        try (java.sql.PreparedStatement insert = jdbcInsert()) {
                            System.out.println("jdbcmany: " + trace.Db.many(insert, Integer.parseInt(w[1])));
                        }
                        break;
                    case "jdbc":
                        try (java.sql.PreparedStatement insert = jdbcInsert()) {
                            System.out.println("jdbc: " + trace.Db.run(insert));
                        }
                        break;
                    case "slow": {
                        long ms = Long.parseLong(w[1]);
                        Thread t = new Thread(() -> trace.Slow.run(ms), "slow");
                        t.setDaemon(true);
                        t.start();
                        System.out.println("slow: started");
                        break;
                    }
                    case "load":
                        for (int i = 1; i < w.length; i++)
                            Class.forName(w[i]);
                        System.out.println("loaded " + (w.length - 1));
                        break;
                    case "exit":
                        System.out.println("bye");
                        return;
                    default:
                        System.out.println("unknown command " + w[0]);
                }
            } catch (Exception e) {
                System.out.println("error: " + e);
            }
        }
    }
}
