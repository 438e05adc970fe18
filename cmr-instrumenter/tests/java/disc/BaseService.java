package disc;

public class BaseService {
    protected int base(int p) {
        return Util.hash(p) + 1;
    }
}
