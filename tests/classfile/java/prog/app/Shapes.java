package app;

import java.util.*;

interface Shape {
  double area();
  default String describe() { return getClass().getSimpleName() + String.format("(%.2f)", area()); }
  static Shape parse(String s) {
    String[] p = s.split(":");
    switch (p[0]) {
      case "circle": return new Circle(Double.parseDouble(p[1]));
      case "square": return new Square(Double.parseDouble(p[1]));
      default: throw new IllegalArgumentException("unknown " + p[0]);
    }
  }
}

record Circle(double r) implements Shape {
  public double area() { return Math.PI * r * r; }
}

record Square(double side) implements Shape {
  Square {
    if (side < 0) throw new IllegalArgumentException("negative");
  }
  public double area() { return side * side; }
}

enum Color {
  RED, GREEN, BLUE;
  String code() {
    switch (this) {
      case RED: return "r";
      case GREEN: return "g";
      default: return "b";
    }
  }
}

abstract class Animal {
  abstract String sound();
  native void unused();
  String speak() { return sound() + "!"; }
}

class Shapes {
  static String run() {
    List<String> r = new ArrayList<>();
    for (String s : new String[] {"circle:1", "square:3", "tri:2"}) {
      try { r.add(Shape.parse(s).describe()); } catch (IllegalArgumentException e) { r.add(e.getMessage()); }
    }
    for (Color c : Color.values()) r.add(c.code());
    Animal a = new Animal() { String sound() { return "woof"; } };
    r.add(a.speak());
    Map<String, Integer> m = new TreeMap<>();
    for (String w : "a b a c b a".split(" ")) m.merge(w, 1, Integer::sum);
    r.add(m.toString());
    return String.join(";", r);
  }
}
