package disc;

public final class Util {
    public static int hash(int n) {
        return mix(n) ^ 7;
    }

    static int mix(int n) {
        return deep(n) * 31;
    }

    static int deep(int n) {
        return deeper(n) + 1;
    }

    static int deeper(int n) {
        return n;
    }

    static void log(String s) {
        System.out.println(s);
    }

    static int twice(Integer i) {
        return i * 2;
    }
}
