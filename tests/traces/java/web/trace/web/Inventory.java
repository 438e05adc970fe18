package trace.web;

/** The servlet's nested calls. */
public class Inventory {
    public static long check(String who) {
        return lookup(who == null ? 0 : who.length());
    }

    static long lookup(int k) {
        long s = 0;
        for (int i = 0; i < 20000; i++)
            s += (i * 31L) ^ k;
        try {
            Thread.sleep(2);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        return s & 0xffff;
    }
}
