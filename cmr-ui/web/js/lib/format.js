// format.js - how numbers, times and names read everywhere in the UI.

// Nanoseconds as a short duration: 812 ns, 4.21 µs, 18.3 ms, 2.40 s.
export function ns(v) {
  if (v === null || v === undefined || Number.isNaN(v)) return '—';
  const a = Math.abs(v);
  if (a < 1e3) return `${Math.round(v)} ns`;
  if (a < 1e6) return `${(v / 1e3).toFixed(a < 1e4 ? 2 : 1)} µs`;
  if (a < 1e9) return `${(v / 1e6).toFixed(a < 1e7 ? 2 : 1)} ms`;
  return `${(v / 1e9).toFixed(2)} s`;
}

export function ms(v) {
  return v === null || v === undefined ? '—' : ns(v * 1e6);
}

// A wall-clock time in ms (or ns when big) as local date and time with milliseconds.
export function time(t) {
  if (t === null || t === undefined) return '—';
  const msv = t > 1e15 ? t / 1e6 : t;
  const d = new Date(msv);
  const pad = (n, w = 2) => String(n).padStart(w, '0');
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${
      pad(
          d.getMinutes(),
          )}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

// "3 s ago", "4 min ago", "2 h ago", "5 d ago".
export function ago(msv, now = Date.now()) {
  if (!msv) return '—';
  const s = Math.max(0, (now - msv) / 1000);
  if (s < 60) return `${Math.round(s)} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

export function count(n) {
  if (n === null || n === undefined) return '—';
  return Number(n).toLocaleString('en-US');
}

// A JVM method as people read it: "shop.Cart.add(I)V" -> { cls: "shop.Cart", name: "add",
// desc: "(I)V", short: "Cart.add" }.
export function method(full) {
  if (!full) return {cls: '', name: '', desc: '', short: '', full: ''};
  const p = full.indexOf('(');
  const head = p >= 0 ? full.slice(0, p) : full;
  const desc = p >= 0 ? full.slice(p) : '';
  const dot = head.lastIndexOf('.');
  const cls = dot >= 0 ? head.slice(0, dot) : '';
  const name = dot >= 0 ? head.slice(dot + 1) : head;
  const simple = cls.slice(cls.lastIndexOf('.') + 1);
  return {cls, name, desc, short: simple ? `${simple}.${name}` : name, full};
}

// A short hex id for tables: first 8 digits.
export function shortId(id) {
  return id ? String(id).slice(0, 8) : '';
}
