/*
 * MooBench - a MooBench-style workload: monitoredMethod recurses to a given depth and does
 * no work, so what is measured is the cost of monitoring each call.
 *
 * stdin:  run WARMUP CALLS DEPTH   -> result ns_per_call=<median over 10 rounds> ...
 *         paced WARMUP CALLS DEPTH RATE
 *                                  -> result ... after CALLS top-level calls at RATE per
 *                                     second (bursts of 1,000, the thread parked between):
 *                                     a steady load whose CPU the caller reads
 *         exit
 */
import java.util.concurrent.locks.LockSupport;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.Arrays;

public class MooBench {
    static long sink;

    public static long monitoredMethod(long methodTime, int recDepth) {
        if (recDepth > 1)
            return monitoredMethod(methodTime, recDepth - 1) + 1;
        return methodTime;
    }

    static double round(long calls, int depth) {
        long t0 = System.nanoTime();
        long s = 0;
        for (long i = 0; i < calls; i++)
            s += monitoredMethod(i & 1, depth);
        long t1 = System.nanoTime();
        sink += s;
        return (double) (t1 - t0) / calls;
    }

    static void paced(long warmup, long calls, int depth, long rate) {
        round(warmup, depth);
        System.out.println("warm");
        final long burst = 1000;
        long t0 = System.nanoTime(), s = 0;
        for (long done = 0; done < calls; done += burst) {
            for (long i = 0; i < burst; i++)
                s += monitoredMethod(i & 1, depth);
            long due = t0 + (done + burst) * 1_000_000_000L / rate, now = System.nanoTime();
            if (due > now)
                LockSupport.parkNanos(due - now);
        }
        long behind = System.nanoTime() - (t0 + calls * 1_000_000_000L / rate);
        sink += s;
        System.out.printf("result ns_per_call=0 behind_ms=%d sink=%d%n", behind / 1_000_000, sink & 1);
    }

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        System.out.println("ready");
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split("\\s+");
            if (w[0].equals("exit"))
                break;
            if (w[0].equals("paced")) {
                paced(Long.parseLong(w[1]), Long.parseLong(w[2]), Integer.parseInt(w[3]), Long.parseLong(w[4]));
                continue;
            }
            if (!w[0].equals("run"))
                continue;
            long warmup = Long.parseLong(w[1]), calls = Long.parseLong(w[2]);
            int depth = Integer.parseInt(w[3]);
            round(warmup, depth);
            double[] r = new double[10];
            for (int i = 0; i < r.length; i++)
                r[i] = round(calls / r.length, depth);
            Arrays.sort(r);
            System.out.printf("result ns_per_call=%.2f min=%.2f max=%.2f sink=%d%n", (r[4] + r[5]) / 2, r[0], r[9],
                    sink & 1);
        }
        System.out.println("bye");
    }
}
