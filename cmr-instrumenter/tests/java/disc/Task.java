package disc;

// A loaded application class implementing a JDK interface: Runnable.run call sites reach it.
public class Task implements Runnable {
    int count;

    public void run() {
        count++;
    }
}
