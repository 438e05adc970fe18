// m-linediff.js - a line diff (Myers' O(ND) algorithm) and its grouping into hunks.
//
//   const d = diffLines(oldText, newText);   // [{ op: 'same'|'del'|'add', text, a, b }]
//   const hs = hunks(d, 3);                   // [{ lines: [...], aStart, bStart }] with
//                                             //   3 lines of context around changes
//   stats(d)                                  // { added, removed }
//
// a / b are 1-based line numbers in the old / new text (null on the other side). The common
// prefix and suffix are taken off first, so a small edit of a big file costs little; when
// the texts differ in more than MAX_EDITS lines, the middle is given as all removed then all
// added (still correct, just not minimal).

const MAX_EDITS = 4000;

export function splitLines(text) {
  if (!text) return [];
  const lines = text.replace(/\r\n?/g, '\n').split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  return lines;
}

export function diffLines(oldText, newText) {
  const a = splitLines(oldText);
  const b = splitLines(newText);
  let pre = 0;
  while (pre < a.length && pre < b.length && a[pre] === b[pre]) pre++;
  let suf = 0;
  while (suf < a.length - pre && suf < b.length - pre && a[a.length - 1 - suf] === b[b.length - 1 - suf]) suf++;
  const midA = a.slice(pre, a.length - suf);
  const midB = b.slice(pre, b.length - suf);
  const ops = myers(midA, midB) || replaceAll(midA, midB);
  const out = [];
  for (let i = 0; i < pre; i++) out.push({op: 'same', text: a[i], a: i + 1, b: i + 1});
  let ai = pre;
  let bi = pre;
  for (const op of ops) {
    if (op === 'same')
      out.push({op, text: a[ai], a: ++ai, b: ++bi});
    else if (op === 'del')
      out.push({op, text: a[ai], a: ++ai, b: null});
    else
      out.push({op, text: b[bi], a: null, b: ++bi});
  }
  for (let i = 0; i < suf; i++) out.push({op: 'same', text: a[ai], a: ++ai, b: ++bi});
  return out;
}

function replaceAll(a, b) {
  return [...a.map(() => 'del'), ...b.map(() => 'add')];
}

// The shortest edit script of a -> b as a list of 'same' | 'del' | 'add', or null when it
// needs more than MAX_EDITS edits.
function myers(a, b) {
  const n = a.length;
  const m = b.length;
  const max = Math.min(n + m, MAX_EDITS);
  const off = max + 1;
  const v = new Int32Array(2 * max + 3);
  const trace = [];
  for (let d = 0; d <= max; d++) {
    trace.push(v.slice(off - d - 1, off + d + 2));
    for (let k = -d; k <= d; k += 2) {
      let x = k === -d || (k !== d && v[off + k - 1] < v[off + k + 1]) ? v[off + k + 1] : v[off + k - 1] + 1;
      let y = x - k;
      while (x < n && y < m && a[x] === b[y]) {
        x++;
        y++;
      }
      v[off + k] = x;
      if (x >= n && y >= m) return backtrack(trace, n, m);
    }
  }
  return null;
}

function backtrack(trace, n, m) {
  const ops = [];
  let x = n;
  let y = m;
  for (let d = trace.length - 1; d >= 0; d--) {
    const vd = trace[d];
    const at = (k) => vd[k + d + 1];
    const k = x - y;
    const prevK = k === -d || (k !== d && at(k - 1) < at(k + 1)) ? k + 1 : k - 1;
    const prevX = at(prevK);
    const prevY = prevX - prevK;
    while (x > prevX && y > prevY) {
      ops.push('same');
      x--;
      y--;
    }
    if (d > 0) ops.push(x === prevX ? 'add' : 'del');
    x = prevX;
    y = prevY;
  }
  return ops.reverse();
}

// Groups a diff into hunks: changed lines with `context` unchanged lines around them.
export function hunks(diff, context = 3) {
  const keep = new Uint8Array(diff.length);
  diff.forEach((l, i) => {
    if (l.op === 'same') return;
    for (let j = Math.max(0, i - context); j <= Math.min(diff.length - 1, i + context); j++) keep[j] = 1;
  });
  const out = [];
  let cur = null;
  diff.forEach((l, i) => {
    if (!keep[i]) {
      cur = null;
      return;
    }
    if (!cur) {
      cur = {lines: [], aStart: l.a ?? nextA(diff, i), bStart: l.b ?? nextB(diff, i)};
      out.push(cur);
    }
    cur.lines.push(l);
  });
  return out;
}

function nextA(diff, i) {
  for (let j = i; j < diff.length; j++)
    if (diff[j].a) return diff[j].a;
  return 0;
}

function nextB(diff, i) {
  for (let j = i; j < diff.length; j++)
    if (diff[j].b) return diff[j].b;
  return 0;
}

export function stats(diff) {
  let added = 0;
  let removed = 0;
  for (const l of diff) {
    if (l.op === 'add')
      added++;
    else if (l.op === 'del')
      removed++;
  }
  return {added, removed};
}
