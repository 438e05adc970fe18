// Groovy script for the class-file engine's JVM test: dynamic dispatch, closures, classes,
// exceptions, GStrings, collections.
def fib(n) { n < 2 ? n : fib(n - 1) + fib(n - 2) }
class Person {
  String name; int age
  Person(String n, int a) { name = n; age = a }
  String toString() { "$name:$age" }
}
def people = [new Person('ann', 31), new Person('bob', 25), new Person('cy', 47)]
println people.sort { it.age }
println people.findAll { it.age > 30 }*.name.join('+')
println((1..15).collect { fib(it) }.join(','))
try { throw new IllegalStateException('x') } catch (e) { println "caught ${e.message}" }
println([a: 1, b: 2].collectEntries { k, v -> [k.toUpperCase(), v * 10] })
def sb = new StringBuilder()
10.times { i -> sb << (i % 3 == 0 ? 'F' : i) }
println sb
println new groovy.json.JsonBuilder([x: 1, y: [1, 2, 3]]).toString()
