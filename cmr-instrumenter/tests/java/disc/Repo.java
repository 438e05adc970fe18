package disc;

public interface Repo {
    String find(int id);
}
