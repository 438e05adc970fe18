package disc;

public abstract class Shape {
    public abstract double area();
}
