package disc;

public class Circle extends Shape {
    public double area() {
        return 3.14;
    }
}
