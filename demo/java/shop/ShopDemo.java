/*
 * ShopDemo - the sample application of the demo: checkout requests served by a pool of
 * worker threads, each going through a few services: prices on the request's thread, the
 * stock check handed to another pool, the payment over HTTP to another JVM
 * (payments.PaymentService). Some calls are slow on purpose, so the call trees show where
 * the time goes, across threads and JVMs.
 *
 *   java shop.ShopDemo SECONDS [PAYMENT_URL]   (without a URL the payment is local)
 */
package shop;

import java.io.IOException;
import java.io.InputStream;
import java.net.HttpURLConnection;
import java.net.URL;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

public class ShopDemo {
    static final AtomicLong served = new AtomicLong();

    public static void main(String[] args) throws Exception {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 10;
        ExecutorService requests = Executors.newFixedThreadPool(4, r -> new Thread(r, "http-worker"));
        ExecutorService stock = Executors.newFixedThreadPool(2, r -> new Thread(r, "stock-checker"));
        CheckoutService checkout = new CheckoutService(new PriceService(), new InventoryService(stock),
                new PaymentGateway(args.length > 1 ? args[1] : null));
        long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
        // args[2]: a file whose appearance ends the run early (scripts/demo.sh, once its
        // diagnosis round is over)
        java.nio.file.Path stop = args.length > 2 ? java.nio.file.Path.of(args[2]) : null;
        while (System.nanoTime() < end && (stop == null || !java.nio.file.Files.exists(stop))) {
            for (int i = 0; i < 4; i++) {
                final int order = (int) served.get() + i;
                requests.submit(() -> checkout.checkout(order));
            }
            Thread.sleep(20);
            served.addAndGet(4);
        }
        requests.shutdown();
        requests.awaitTermination(30, TimeUnit.SECONDS);
        stock.shutdown();
        System.out.println("served " + served.get() + " checkouts");
    }

    static void work(long micros) {
        long until = System.nanoTime() + micros * 1000;
        while (System.nanoTime() < until)
            Thread.onSpinWait();
    }
}

class CheckoutService {
    final PriceService prices;
    final InventoryService inventory;
    final PaymentGateway payments;

    CheckoutService(PriceService p, InventoryService i, PaymentGateway g) {
        prices = p;
        inventory = i;
        payments = g;
    }

    String checkout(int order) {
        long total = prices.total(order);
        if (!inventory.reserve(order))
            return "out of stock";
        return payments.charge(order, total) ? "ok" : "declined";
    }
}

class PriceService {
    long total(int order) {
        long sum = 0;
        for (int line = 0; line < 3; line++)
            sum += price(order, line);
        return sum;
    }

    long price(int order, int line) {
        ShopDemo.work(200);
        return 1000 + (order * 31 + line) % 500;
    }
}

class InventoryService {
    final ExecutorService checker;

    InventoryService(ExecutorService checker) {
        this.checker = checker;
    }

    boolean reserve(int order) {
        try {
            Future<Boolean> f = checker.submit(() -> inStock(order));
            return f.get();
        } catch (Exception e) {
            return false;
        }
    }

    boolean inStock(int order) {
        ShopDemo.work(300);
        return order % 17 != 0;
    }
}

class PaymentGateway {
    final String url; // the payment service, or null: pay locally

    PaymentGateway(String url) {
        this.url = url;
    }

    boolean charge(int order, long amount) {
        if (url == null) {
            // every tenth payment goes to a slow provider
            ShopDemo.work(order % 10 == 0 ? 15000 : 500);
            return ThreadLocalRandom.current().nextInt(100) < 97;
        }
        try {
            HttpURLConnection c = (HttpURLConnection) new URL(url + "?order=" + order + "&amount=" + amount)
                    .openConnection();
            c.setConnectTimeout(2000);
            c.setReadTimeout(10000);
            if (c.getResponseCode() != 200)
                return false;
            try (InputStream in = c.getInputStream()) { // read to the end: the connection is reused
                return new String(in.readAllBytes(), StandardCharsets.UTF_8).equals("approved");
            }
        } catch (IOException e) {
            return false;
        }
    }
}
