package disc.ext;

public class Lib {
    public static int call(int n) {
        return n + 1;
    }
}
