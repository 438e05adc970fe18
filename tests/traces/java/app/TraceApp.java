/*
 * TraceApp - the application of the trace tests (tests/traces/test_traces.py). It reads
 * commands on stdin and answers on stdout, one line each; every command runs one scenario
 * whose root method is instrumented, so each command makes one trace:
 *
 *   nested            -> nested: done         trace.Nested.run: calls nested in one thread
 *   pool TASKS        -> pool: tasks=N        trace.Pool.run: ExecutorService.submit
 *   scheduled         -> scheduled: done      trace.Pool.scheduled: a task 5 ms later
 *   thread            -> thread: done         trace.Threads.run: Thread.start + join
 *   chain             -> chain: N             trace.Chain.run: CompletableFuture stages
 *   forkjoin N        -> forkjoin: N          trace.Sum.total: a RecursiveTask in a ForkJoinPool
 *   http URL          -> http: CODE CODE      trace.Client.run: HttpURLConnection, then HttpClient
 *   local             -> local: CODE          trace.Client.local: HttpURLConnection into a
 *                                             JDK HttpServer of this JVM
 *   slow MS           -> slow: started        trace.Slow.run on a thread of its own, MS long
 *   load CLASS...     -> loaded N             Class.forName: the classes load (and get
 *                                             instrumented) before their scenario runs
 *   exit              -> the JVM ends normally
 */
import java.io.BufferedReader;
import java.io.InputStreamReader;

public class TraceApp {
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
                    case "thread":
                        trace.Threads.run();
                        System.out.println("thread: done");
                        break;
                    case "chain":
                        System.out.println("chain: " + trace.Chain.run());
                        break;
                    case "forkjoin":
                        System.out.println("forkjoin: " + trace.Sum.total(Integer.parseInt(w[1])));
                        break;
                    case "http":
                        System.out.println("http: " + trace.Client.run(w[1]));
                        break;
                    case "local":
                        System.out.println("local: " + trace.Client.local());
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
