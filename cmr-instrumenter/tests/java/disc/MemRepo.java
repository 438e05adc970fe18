package disc;

public class MemRepo implements Repo {
    public String find(int id) {
        return "mem";
    }
}
