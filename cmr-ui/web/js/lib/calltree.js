// calltree.js - call trees of traces as flat arrays, so that views of 100,000 calls stay fast:
//
//   flattenTrace(trace)         the tree of GET /api/traces/<id> in pre-order: node i's
//                               subtree is [i, end[i]), its parent parent[i], its depth depth[i]
//   visibleRows(flat, open)     the rows shown when the nodes with open[i] set are expanded
//   criticalPath(flat)          from each root, the child with the largest total, down to a leaf
//   ancestors / reveal          to open the way to a node
//   findMatches(flat, text)     nodes whose method, SQL or URL contains text (case-insensitive)
//   frameTree(trace)            { name, total, self, count, children } for the flame graph
//   mergeFrameTrees(trees)      the same for many traces: one frame per call path
//
// Everything is iterative (no recursion), so a 10,000-deep tree does not overflow the stack.

// Flat arrays of a trace's nodes (pre-order). Times are relative to the trace start in ns.
export function flattenTrace(trace) {
  const nodes = [];
  const depths = [];
  const parents = [];
  const stack = [];
  const roots = trace.roots || [];
  for (let r = roots.length - 1; r >= 0; r--) stack.push([roots[r], 0, -1]);
  while (stack.length) {
    const [node, depth, parent] = stack.pop();
    const i = nodes.length;
    nodes.push(node);
    depths.push(depth);
    parents.push(parent);
    const kids = node.children || [];
    for (let c = kids.length - 1; c >= 0; c--) stack.push([kids[c], depth + 1, i]);
  }
  return buildFlat(nodes, depths, parents, trace.start_ns || 0);
}

function buildFlat(nodes, depths, parents, t0) {
  const n = nodes.length;
  const flat = {
    n,
    nodes,
    depth: Int32Array.from(depths),
    parent: Int32Array.from(parents),
    end: new Int32Array(n),
    start: new Float64Array(n),
    total: new Float64Array(n),
    self: new Float64Array(n),
    wait: new Float64Array(n),
    hasWait: false,
    maxDepth: 0,
  };
  for (let i = n - 1; i >= 0; i--) {
    const nd = nodes[i];
    if (flat.end[i] === 0) flat.end[i] = i + 1;
    const p = parents[i];
    if (p >= 0 && flat.end[p] < flat.end[i]) flat.end[p] = flat.end[i];
    flat.start[i] = (nd.start_ns || t0) - t0;
    flat.total[i] = nd.total_ns || 0;
    flat.self[i] = nd.self_ns || 0;
    if (nd.wait_ns !== undefined && nd.wait_ns !== null) {
      flat.wait[i] = nd.wait_ns;
      flat.hasWait = true;
    }
    if (depths[i] > flat.maxDepth) flat.maxDepth = depths[i];
  }
  return flat;
}

// The children of node i, in order.
export function childrenOf(flat, i) {
  const out = [];
  for (let j = i + 1; j < flat.end[i]; j = flat.end[j]) out.push(j);
  return out;
}

export function hasChildren(flat, i) {
  return flat.end[i] > i + 1;
}

// True when node i runs in another JVM than its caller.
export function isRemote(flat, i) {
  const p = flat.parent[i];
  return p >= 0 && flat.nodes[p].agent_id !== flat.nodes[i].agent_id;
}

// Row order when only nodes with open[i] === 1 show their children.
export function visibleRows(flat, open) {
  const rows = new Int32Array(flat.n);
  let k = 0;
  let i = 0;
  while (i < flat.n) {
    rows[k++] = i;
    i = open[i] ? i + 1 : flat.end[i];
  }
  return rows.subarray(0, k);
}

// From every root, the child with the largest total, down to a leaf: a Uint8Array mark.
export function criticalPath(flat) {
  const on = new Uint8Array(flat.n);
  for (let r = 0; r < flat.n; r = flat.end[r]) {
    let i = r;
    while (i >= 0) {
      on[i] = 1;
      let best = -1;
      for (let j = i + 1; j < flat.end[i]; j = flat.end[j])
        if (best < 0 || flat.total[j] > flat.total[best]) best = j;
      i = best;
    }
  }
  return on;
}

export function ancestors(flat, i) {
  const out = [];
  for (let p = flat.parent[i]; p >= 0; p = flat.parent[p]) out.push(p);
  return out;
}

// Opens every ancestor of i; true when something changed.
export function reveal(flat, open, i) {
  let changed = false;
  for (const p of ancestors(flat, i))
    if (!open[p]) {
      open[p] = 1;
      changed = true;
    }
  return changed;
}

export function findMatches(flat, text) {
  const q = text.trim().toLowerCase();
  if (!q) return [];
  const out = [];
  for (let i = 0; i < flat.n; i++) {
    const n = flat.nodes[i];
    const a = n.attributes || {};
    const attr = `${a['db.statement'] || ''} ${a['url.full'] || ''}`.toLowerCase();
    if ((n.method || '').toLowerCase().includes(q) || attr.includes(q)) out.push(i);
  }
  return out;
}

// A node's name in frame trees: the method, or its kind when it has none.
function frameName(node) {
  return node.method || `[${node.kind || 'unknown'}]`;
}

// The call tree of one trace as a frame tree; several roots go under one "[trace]" frame.
export function frameTree(trace) {
  const roots = (trace.roots || []).map(convertNode);
  if (roots.length === 1) return roots[0];
  const total = roots.reduce((s, r) => s + r.total, 0);
  return {name: '[trace]', total, self: 0, count: 1, children: roots};
}

function convertNode(root) {
  const out = {name: frameName(root), total: root.total_ns || 0, self: root.self_ns || 0, count: 1, children: []};
  const stack = [[root, out]];
  while (stack.length) {
    const [src, dst] = stack.pop();
    for (const c of src.children || []) {
      const f = {name: frameName(c), total: c.total_ns || 0, self: c.self_ns || 0, count: 1, children: []};
      dst.children.push(f);
      stack.push([c, f]);
    }
  }
  return out;
}

// Many traces as one frame tree: calls on the same path of methods from the root are one
// frame (totals, self times and calls summed); children sorted by total, largest first.
export function mergeFrameTrees(traces) {
  const top = {name: `[${traces.length} traces]`, total: 0, self: 0, count: traces.length, kids: new Map()};
  for (const t of traces)
    for (const r of t.roots || []) mergeInto(top, r);
  return finishMerged(top);
}

function mergeInto(top, root) {
  const stack = [[root, top]];
  while (stack.length) {
    const [src, parent] = stack.pop();
    const name = frameName(src);
    let f = parent.kids.get(name);
    if (!f) {
      f = {name, total: 0, self: 0, count: 0, kids: new Map()};
      parent.kids.set(name, f);
    }
    f.total += src.total_ns || 0;
    f.self += src.self_ns || 0;
    f.count += 1;
    for (const c of src.children || []) stack.push([c, f]);
  }
}

function finishMerged(top) {
  const stack = [top];
  while (stack.length) {
    const f = stack.pop();
    f.children = [...f.kids.values()].sort((a, b) => b.total - a.total);
    delete f.kids;
    for (const c of f.children) stack.push(c);
  }
  top.total = top.children.reduce((s, c) => s + c.total, 0);
  return top.children.length === 1 ? top.children[0] : top;
}
