package disc;

public class SqlRepo implements Repo {
    public String find(int id) {
        return "sql" + Util.hash(id);
    }
}
