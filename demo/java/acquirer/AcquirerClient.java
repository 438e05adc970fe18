/*
 * AcquirerClient - the demo payment service's client library for its card acquirer: a
 * third-party jar, as far as the demo's environment is concerned (it records shop.* and
 * payments.*, not acquirer.*). Every tenth authorization opens a new TLS session, which
 * takes about 15 ms; the others reuse one. The diagnosis in scripts/demo.sh finds this: the
 * slow-bank rule fires on payments.Bank.authorize, and the callees the instrumenter
 * discovers under it (this class's methods) show where its time goes.
 */
package acquirer;

public final class AcquirerClient {
    private AcquirerClient() {
    }

    public static boolean authorize(int order, long amount) {
        if (order % 10 == 0)
            Tls.handshake();
        return Wire.send(order, amount);
    }
}

final class Tls {
    private Tls() {
    }

    static void handshake() {
        Wire.spin(15000);
    }
}

final class Wire {
    private Wire() {
    }

    static boolean send(int order, long amount) {
        spin(400);
        return amount > 0;
    }

    static void spin(long micros) {
        long until = System.nanoTime() + micros * 1000;
        while (System.nanoTime() < until)
            Thread.onSpinWait();
    }
}
