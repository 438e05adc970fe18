package disc;

public class Polite implements Greeter {
}
