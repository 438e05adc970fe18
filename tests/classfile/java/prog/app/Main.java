/* Test program for the class-file engine's JVM runs: compiled by (instrumented) javac, then
 * run with and without instrumentation; the output must be identical. */
package app;

import java.util.*;
import java.util.stream.*;

public class Main {
  public static void main(String[] args) throws Exception {
    StringBuilder out = new StringBuilder();
    out.append("ctors: ").append(Ctors.run()).append('\n');
    out.append("exceptions: ").append(Exc.run()).append('\n');
    out.append("sync: ").append(Sync.run()).append('\n');
    out.append("shapes: ").append(Shapes.run()).append('\n');
    out.append("big: ").append(Big.run()).append('\n');
    out.append("wide: ").append(Types.run()).append('\n');
    List<String> words = Arrays.asList("delta", "alpha", "charlie", "bravo");
    out.append("streams: ")
        .append(words.stream().sorted().map(w -> w.toUpperCase()).collect(Collectors.joining("|")))
        .append(' ').append(IntStream.rangeClosed(1, 100).filter(i -> i % 7 == 0).sum()).append('\n');
    System.out.print(out);
  }
}
