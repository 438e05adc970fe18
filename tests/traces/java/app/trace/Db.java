package trace;

import java.sql.CallableStatement;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.Statement;
import javax.sql.DataSource;

/** run(insert): JDBC in one trace, on whatever driver `insert`'s connection is (H2 in the
 *  trace tests): a statement with literals (a string and numbers), a query, the prepared
 *  insert it is given (prepared outside any trace, by TraceApp), a statement prepared
 *  here and a CallableStatement. pooled(ds): the same through a connection pool (HikariCP on PostgreSQL in the
 *  tests), the connection and the insert taken inside the trace. Both return the rows they
 *  saw. The SQL the tree shows is checked by test_traces.py. */
public class Db {
    public static int run(PreparedStatement insert) throws Exception {
        return statements(insert.getConnection(), insert);
    }

    /** many(insert): `n` queries in a row on the insert's connection, each with its own
     *  literal (more statements than the publisher sends call attributes in one batch). */
    public static int many(PreparedStatement insert, int n) throws Exception {
        int rows = 0;
        try (Statement st = insert.getConnection().createStatement()) {
            for (int i = 0; i < n; i++)
                try (ResultSet rs = st.executeQuery("select count(*) from orders where amount = " + i)) {
                    rs.next();
                    rows += rs.getInt(1);
                }
        }
        return rows;
    }

    public static int pooled(DataSource ds) throws Exception {
        try (Connection c = ds.getConnection();
             PreparedStatement insert = c.prepareStatement("insert into orders(customer, amount) values (?, ?)")) {
            return statements(c, insert);
        }
    }

    static int statements(Connection c, PreparedStatement insert) throws Exception {
        int n = 0;
        try (Statement st = c.createStatement()) {
            st.executeUpdate("delete from orders where customer = 'secret-customer' or amount > 1000");
            try (ResultSet rs = st.executeQuery("select count(*) from orders where amount = 42")) {
                rs.next();
                n += rs.getInt(1);
            }
        }
        insert.setString(1, "alice");
        insert.setInt(2, 7);
        n += insert.executeUpdate();
        try (PreparedStatement q = c.prepareStatement("select id, amount from orders where customer = ?")) {
            q.setString(1, "alice");
            try (ResultSet rs = q.executeQuery()) {
                while (rs.next())
                    n++;
            }
        }
        try (CallableStatement call = c.prepareCall("{call abs(?)}")) { // a function, as both databases have it
            call.setInt(1, -3);
            try (ResultSet rs = call.executeQuery()) {
                rs.next();
                n += rs.getInt(1) - 3;
            }
        }
        return n;
    }
}
