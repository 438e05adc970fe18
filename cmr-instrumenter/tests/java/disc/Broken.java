package disc;

public class Broken {
    public static int run(int n) {
        return n;
    }
}
