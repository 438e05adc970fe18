// flamegraph.js - a canvas flame graph (icicle: the root on top, callees below).
//
//   const fg = new FlameGraph(containerEl, { onZoom(frame) {} });
//   fg.setTree({ name, total, self, count, children: [...] });   // calltree.js makes these
//   fg.reset(); fg.destroy();
//
// A frame's width is its total time; its colour says its package (stable hash); a darker
// strip along its bottom edge is its self time. Hover shows method, total, self, % of the
// root (and calls, for merged trees); click zooms into a frame (its ancestors stay, shaded);
// click the root or reset() to zoom out. No DOM per frame: frames are laid out once in flat
// arrays (pre-order), and drawing skips whole subtrees that are off-screen or under a pixel
// wide, so 100,000 frames draw in a few milliseconds.

import {count, method as parseMethod, ns} from './format.js';
import {CanvasScroller, fitText, packageColor, Tooltip} from './tr-canvas.js';

const ROW = 18;
const FONT = '11px ui-monospace, "DejaVu Sans Mono", Menlo, monospace';

export class FlameGraph {
  constructor(container, {onZoom} = {}) {
    this.onZoom = onZoom || (() => {});
    this.layout = null;
    this.zoom = 0;
    this.hover = -1;
    this.tip = new Tooltip();
    this.charWidth = 6.6;
    this.scroller = new CanvasScroller(container, {
      draw: (ctx, w, hgt, top) => this.draw(ctx, w, hgt, top),
      contentHeight: () => (this.layout ? (this.layout.maxDepth + 1) * ROW + 4 : 0),
    });
    const cv = this.scroller.canvas;
    cv.addEventListener('mousemove', (ev) => this.onMove(ev));
    cv.addEventListener('mouseleave', () => this.onLeave());
    cv.addEventListener('click', (ev) => this.onClick(ev));
  }

  setTree(root) {
    this.layout = layoutFrames(root);
    this.zoom = 0;
    this.scroller.redraw();
  }

  reset() {
    this.zoomTo(0);
  }

  zoomTo(i) {
    this.zoom = i;
    this.onZoom(this.frameInfo(i));
    this.scroller.redraw();
  }

  // What the view needs to say about frame i.
  frameInfo(i) {
    const L = this.layout;
    if (!L || i < 0) return null;
    return {
      index: i,
      name: L.frames[i].name,
      total: L.frames[i].total,
      self: L.frames[i].self,
      count: L.frames[i].count,
      depth: L.depth[i]
    };
  }

  // Pixel scale of the zoomed frame: value -> x.
  scale(width) {
    const L = this.layout;
    const x0 = L.x[this.zoom];
    const w = L.w[this.zoom] || 1;
    return {x0, k: width / w};
  }

  draw(ctx, width, height, top) {
    const L = this.layout;
    if (!L || !L.n) return;
    ctx.font = FONT;
    this.charWidth = ctx.measureText('M').width || 6.6;
    ctx.textBaseline = 'middle';
    const {x0, k} = this.scale(width);
    const zoomDepth = L.depth[this.zoom];
    const firstDepth = Math.floor(top / ROW);
    const lastDepth = Math.ceil((top + height) / ROW);
    let i = 0;
    while (i < L.n) {
      const px = (L.x[i] - x0) * k;
      const pw = L.w[i] * k;
      if (pw < 0.5 || px + pw < 0 || px > width || L.depth[i] > lastDepth) {
        i = L.end[i];
        continue;
      }
      if (L.depth[i] >= firstDepth)
        this.drawFrame(ctx, i, px, pw, L.depth[i] * ROW - top, width, L.depth[i] < zoomDepth);
      i++;
    }
  }

  drawFrame(ctx, i, px, pw, y, width, shaded) {
    const f = this.layout.frames[i];
    const c = packageColor(f.name);
    const x = Math.max(0, px);
    const w = Math.min(width, px + pw) - x;
    ctx.fillStyle = c.fill;
    ctx.globalAlpha = shaded ? 0.45 : 1;
    ctx.fillRect(x, y, Math.max(0.5, w - (w > 3 ? 1 : 0)), ROW - 1);
    const selfW = f.total > 0 ? (pw * f.self) / f.total : 0;
    if (selfW >= 1) {
      ctx.fillStyle = c.dark;
      ctx.fillRect(Math.max(x, px + pw - selfW), y + ROW - 4, Math.min(selfW, w) - (w > 3 ? 1 : 0), 3);
    }
    if (i === this.hover) {
      ctx.strokeStyle = '#111827';
      ctx.lineWidth = 1;
      ctx.strokeRect(x + 0.5, y + 0.5, Math.max(1, w - 2), ROW - 2);
    }
    if (w > 24) {
      const m = parseMethod(f.name);
      const label = fitText(ctx, w > 200 ? `${m.short}  ${m.cls}` : m.short || f.name, w - 6, this.charWidth);
      if (label) {
        ctx.fillStyle = '#1d2330';
        ctx.fillText(label, x + 3, y + ROW / 2);
      }
    }
    ctx.globalAlpha = 1;
  }

  // The frame under the mouse, or -1.
  frameAt(ev) {
    const L = this.layout;
    if (!L) return -1;
    const {x, y} = this.scroller.point(ev);
    const d = Math.floor(y / ROW);
    const {x0, k} = this.scale(this.scroller.box.clientWidth);
    const v = x / k + x0;
    let i = 0;
    while (i < L.n) {
      if (L.depth[i] > d || v < L.x[i] || v >= L.x[i] + L.w[i] || L.w[i] * k < 0.5) {
        i = L.end[i];
        continue;
      }
      if (L.depth[i] === d) return i;
      i++;
    }
    return -1;
  }

  onMove(ev) {
    const i = this.frameAt(ev);
    if (i !== this.hover) {
      this.hover = i;
      this.scroller.redraw();
    }
    if (i < 0) {
      this.tip.hide();
      return;
    }
    const L = this.layout;
    const f = L.frames[i];
    const rootTotal = L.frames[0].total || 1;
    const lines = [
      f.name, ['total', ns(f.total)], ['self', ns(f.self)], ['of root', `${((100 * f.total) / rootTotal).toFixed(2)} %`]
    ];
    if (f.count > 1) lines.push(['calls', count(f.count)]);
    lines.push(i === this.zoom ? 'click: zoom out' : 'click: zoom in');
    this.tip.show(ev, lines);
    this.scroller.canvas.style.cursor = 'pointer';
  }

  onLeave() {
    this.hover = -1;
    this.tip.hide();
    this.scroller.redraw();
  }

  onClick(ev) {
    const i = this.frameAt(ev);
    if (i < 0) return;
    this.zoomTo(i === this.zoom ? Math.max(0, this.layout.parent[i]) : i);
  }

  destroy() {
    this.tip.destroy();
    this.scroller.destroy();
  }
}

// Pre-order flat layout: x (offset in value units), w (width), depth, parent, end (subtree end).
// Children wider than their parent together (async callees) are scaled to fit it.
function layoutFrames(root) {
  const frames = [];
  const xs = [];
  const ws = [];
  const depths = [];
  const parents = [];
  const stack = [[root, 0, root.total, 0, -1]];
  let maxDepth = 0;
  while (stack.length) {
    const [f, x, w, d, p] = stack.pop();
    const i = frames.length;
    frames.push(f);
    xs.push(x);
    ws.push(w);
    depths.push(d);
    parents.push(p);
    if (d > maxDepth) maxDepth = d;
    const kids = f.children || [];
    const sum = kids.reduce((s, c) => s + c.total, 0);
    const k = f.total > 0 ? w / Math.max(f.total, sum) : 0;
    const placed = [];
    let cx = x;
    for (const c of kids) {
      placed.push([c, cx, c.total * k, d + 1, i]);
      cx += c.total * k;
    }
    for (let j = placed.length - 1; j >= 0; j--) stack.push(placed[j]);
  }
  const n = frames.length;
  const end = new Int32Array(n);
  for (let i = n - 1; i >= 0; i--) {
    if (end[i] === 0) end[i] = i + 1;
    const p = parents[i];
    if (p >= 0 && end[p] < end[i]) end[p] = end[i];
  }
  return {
    n,
    frames,
    x: Float64Array.from(xs),
    w: Float64Array.from(ws),
    depth: Int32Array.from(depths),
    parent: Int32Array.from(parents),
    end,
    maxDepth,
  };
}
