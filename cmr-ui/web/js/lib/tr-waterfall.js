// tr-waterfall.js - the waterfall of one trace on a canvas: one lane per (JVM, thread), the
// calls as bars on a time axis shared by all lanes, nested by depth within the lane.
//
//   const wf = new Waterfall(containerEl, flat, { onSelect(node), onZoom(from, to, full) });
//   wf.resetZoom(); wf.destroy();
//
// flat is calltree.js' flattenTrace(). Copes with 100,000 calls: only the lanes in view are
// drawn, and calls narrower than a pixel that fall on an already painted pixel are skipped
// (merged). Hover shows method, start offset and duration; a click selects (onSelect);
// dragging across zooms into that time range, a double-click zooms out.

import {method as parseMethod, ns} from './format.js';
import {CanvasScroller, fitText, packageColor, Tooltip} from './tr-canvas.js';

const AXIS = 26;
const LABEL = 230;
const BAR = 17;
const PAD = 8;
const RIGHT = 12;
const FONT = '11px ui-monospace, "DejaVu Sans Mono", Menlo, monospace';
const LABEL_FONT = '12px system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif';

export class Waterfall {
  constructor(container, flat, {onSelect, onZoom} = {}) {
    this.flat = flat;
    this.onSelect = onSelect || (() => {});
    this.onZoom = onZoom || (() => {});
    this.buildLanes();
    this.range = [this.tMin, this.tMax];
    this.hover = -1;
    this.selected = -1;
    this.drag = null;
    this.tip = new Tooltip();
    this.scroller = new CanvasScroller(container, {
      draw: (ctx, w, hgt, top) => this.draw(ctx, w, hgt, top),
      contentHeight: () => this.height,
    });
    const cv = this.scroller.canvas;
    cv.addEventListener('mousemove', (ev) => this.onMove(ev));
    cv.addEventListener('mouseleave', () => this.onLeave());
    cv.addEventListener('mousedown', (ev) => this.onDown(ev));
    cv.addEventListener('dblclick', () => this.resetZoom());
    this.onUp = (ev) => this.onMouseUp(ev);
    window.addEventListener('mouseup', this.onUp);
  }

  // Lanes by (agent, thread id), in order of their first call; depth within the lane.
  buildLanes() {
    const f = this.flat;
    const byKey = new Map();
    const lanes = [];
    const laneDepth = new Int32Array(f.n);
    this.laneOf = new Int32Array(f.n);
    this.tMin = Infinity;
    this.tMax = -Infinity;
    for (let i = 0; i < f.n; i++) {
      const n = f.nodes[i];
      const key = `${n.agent_id}|${n.thread_id}|${n.thread}`;
      let li = byKey.get(key);
      if (li === undefined) {
        li = lanes.length;
        byKey.set(key, li);
        lanes.push({
          jvm: n.jvm || n.agent_id || '',
          thread: n.thread || '(no thread)',
          threadId: n.thread_id,
          first: f.start[i],
          rows: []
        });
      }
      const p = f.parent[i];
      laneDepth[i] = p >= 0 && this.laneOf[p] === li ? laneDepth[p] + 1 : 0;
      this.laneOf[i] = li;
      const lane = lanes[li];
      if (f.start[i] < lane.first) lane.first = f.start[i];
      (lane.rows[laneDepth[i]] ||= []).push(i);
      if (f.start[i] < this.tMin) this.tMin = f.start[i];
      if (f.start[i] + f.total[i] > this.tMax) this.tMax = f.start[i] + f.total[i];
    }
    if (!f.n) [this.tMin, this.tMax] = [0, 1];
    if (this.tMax <= this.tMin) this.tMax = this.tMin + 1;
    lanes.sort((a, b) => a.first - b.first);
    let y = AXIS;
    for (const lane of lanes) {
      for (let d = 0; d < lane.rows.length; d++) {
        const row = (lane.rows[d] || []).sort((a, b) => f.start[a] - f.start[b]);
        lane.rows[d] = Int32Array.from(row);
      }
      lane.top = y;
      lane.height = Math.max(40, lane.rows.length * BAR + PAD);
      y += lane.height;
    }
    this.laneDepth = laneDepth;
    this.lanes = lanes;
    this.laneIndex = new Map(lanes.map((l, k) => [l, k]));
    this.height = y + 4;
  }

  resetZoom() {
    this.setRange(this.tMin, this.tMax);
  }

  setRange(a, b) {
    this.range = [a, Math.max(b, a + 1)];
    this.onZoom(this.range[0] - this.tMin, this.range[1] - this.tMin, a <= this.tMin && b >= this.tMax);
    this.scroller.redraw();
  }

  xScale(width) {
    const [a, b] = this.range;
    const k = (width - LABEL - RIGHT) / (b - a);
    return {a, k, toX: (t) => LABEL + (t - a) * k, toT: (x) => a + (x - LABEL) / k};
  }

  // ---- drawing ----

  draw(ctx, width, height, top) {
    const sc = this.xScale(width);
    ctx.font = FONT;
    ctx.textBaseline = 'middle';
    this.charWidth = ctx.measureText('M').width || 6.6;
    this.lanes.forEach((lane, k) => {
      const y0 = lane.top - top;
      if (y0 + lane.height < AXIS || y0 > height) return;
      this.drawLane(ctx, lane, k, y0, width, height, sc);
    });
    this.drawLabels(ctx, top, height);
    this.drawAxis(ctx, width, sc);
    this.drawDrag(ctx, height);
  }

  drawLane(ctx, lane, k, y0, width, height, sc) {
    ctx.fillStyle = k % 2 ? '#fafbfc' : '#ffffff';
    ctx.fillRect(LABEL, y0, width - LABEL, lane.height);
    ctx.fillStyle = '#e3e6eb';
    ctx.fillRect(0, y0 + lane.height - 1, width, 1);
    const f = this.flat;
    const xMax = width - RIGHT;
    for (let d = 0; d < lane.rows.length; d++) {
      const y = y0 + PAD / 2 + d * BAR;
      if (y + BAR < AXIS || y > height) continue;
      let lastEnd = -1;
      for (const i of lane.rows[d]) {
        const x0 = sc.toX(f.start[i]);
        if (x0 > xMax) break;
        const x1 = sc.toX(f.start[i] + f.total[i]);
        if (x1 < LABEL) continue;
        const cx0 = Math.max(LABEL, x0);
        const cx1 = Math.min(xMax, Math.max(x1, cx0 + 1));
        if (cx1 <= lastEnd + 0.5) continue;
        this.drawBar(ctx, i, Math.max(cx0, lastEnd), cx1, y);
        lastEnd = cx1;
      }
    }
  }

  drawBar(ctx, i, x0, x1, y) {
    const n = this.flat.nodes[i];
    const w = x1 - x0;
    ctx.fillStyle = n.exception ? '#f3a29b' : packageColor(n.method || '').fill;
    ctx.fillRect(x0, y, w > 3 ? w - 1 : w, BAR - 2);
    if (i === this.selected || i === this.hover) {
      ctx.strokeStyle = i === this.selected ? '#2563eb' : '#111827';
      ctx.lineWidth = i === this.selected ? 2 : 1;
      ctx.strokeRect(x0 + 0.5, y + 0.5, Math.max(1, w - 1), BAR - 3);
    }
    if (w > 30) {
      const label = fitText(ctx, parseMethod(n.method).short || n.kind || '', w - 6, this.charWidth);
      if (label) {
        ctx.fillStyle = '#1d2330';
        ctx.fillText(label, x0 + 3, y + (BAR - 2) / 2);
      }
    }
  }

  drawLabels(ctx, top, height) {
    ctx.font = LABEL_FONT;
    ctx.textBaseline = 'top';
    ctx.fillStyle = '#ffffff';
    ctx.fillRect(0, AXIS, LABEL - 1, height - AXIS);
    ctx.fillStyle = '#e3e6eb';
    ctx.fillRect(LABEL - 1, AXIS, 1, height - AXIS);
    for (const lane of this.lanes) {
      const y0 = lane.top - top;
      if (y0 + lane.height < AXIS || y0 > height) continue;
      ctx.fillStyle = '#e3e6eb';
      ctx.fillRect(0, y0 + lane.height - 1, LABEL, 1);
      ctx.fillStyle = '#1d2330';
      ctx.font = `600 ${LABEL_FONT}`;
      ctx.fillText(cut(ctx, `${lane.thread} #${lane.threadId}`, LABEL - 16), 10, y0 + 5);
      ctx.font = LABEL_FONT;
      ctx.fillStyle = '#667085';
      if (lane.height >= 34) ctx.fillText(cut(ctx, lane.jvm, LABEL - 16), 10, y0 + 20);
    }
    ctx.textBaseline = 'middle';
  }

  drawAxis(ctx, width, sc) {
    ctx.fillStyle = '#fafbfc';
    ctx.fillRect(0, 0, width, AXIS);
    ctx.fillStyle = '#e3e6eb';
    ctx.fillRect(0, AXIS - 1, width, 1);
    const [a, b] = this.range;
    const step = niceStep((b - a) / Math.max(2, (width - LABEL) / 110));
    ctx.font = '11px system-ui, sans-serif';
    ctx.textBaseline = 'middle';
    for (let t = Math.ceil((a - this.tMin) / step) * step + this.tMin; t <= b; t += step) {
      const x = Math.round(sc.toX(t)) + 0.5;
      ctx.fillStyle = '#cfd4dc';
      ctx.fillRect(x, AXIS - 6, 1, 6);
      ctx.fillStyle = '#667085';
      ctx.fillText(ns(t - this.tMin), x + 3, AXIS / 2);
    }
    ctx.fillStyle = '#667085';
    ctx.fillText('lane: thread @ JVM', 10, AXIS / 2);
  }

  drawDrag(ctx, height) {
    if (!this.drag || Math.abs(this.drag.x1 - this.drag.x0) < 3) return;
    const x = Math.min(this.drag.x0, this.drag.x1);
    ctx.fillStyle = 'rgba(37, 99, 235, .12)';
    ctx.fillRect(x, AXIS, Math.abs(this.drag.x1 - this.drag.x0), height - AXIS);
    ctx.fillStyle = 'rgba(37, 99, 235, .6)';
    ctx.fillRect(x, AXIS, 1, height - AXIS);
    ctx.fillRect(x + Math.abs(this.drag.x1 - this.drag.x0), AXIS, 1, height - AXIS);
  }

  // ---- finding the call under the mouse ----

  nodeAt(ev) {
    const {x, y, viewY} = this.scroller.point(ev);
    if (x < LABEL || viewY < AXIS) return -1;
    const lane = this.lanes.find((l) => y >= l.top && y < l.top + l.height);
    if (!lane) return -1;
    const d = Math.floor((y - lane.top - PAD / 2) / BAR);
    const row = lane.rows[d];
    if (!row) return -1;
    const sc = this.xScale(this.scroller.box.clientWidth);
    const t = sc.toT(x);
    const slack = 2 / sc.k;
    const f = this.flat;
    let lo = 0;
    let hi = row.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (f.start[row[mid]] <= t + slack)
        lo = mid + 1;
      else
        hi = mid;
    }
    for (let k = lo - 1; k >= 0 && k >= lo - 50; k--) {
      const i = row[k];
      if (f.start[i] + f.total[i] + slack >= t) return i;
    }
    return -1;
  }

  onMove(ev) {
    if (this.drag) {
      this.drag.x1 = this.scroller.point(ev).x;
      this.tip.hide();
      this.scroller.redraw();
      return;
    }
    const i = this.nodeAt(ev);
    if (i !== this.hover) {
      this.hover = i;
      this.scroller.redraw();
    }
    this.scroller.canvas.style.cursor = i >= 0 ? 'pointer' : 'crosshair';
    if (i < 0) {
      this.tip.hide();
      return;
    }
    const f = this.flat;
    const n = f.nodes[i];
    this.tip.show(ev, [
      n.method || n.kind,
      ['start', `+${ns(f.start[i] - this.tMin)}`],
      ['duration', ns(f.total[i])],
      ['self', ns(f.self[i])],
      ['thread', `${n.thread} #${n.thread_id}`],
      ['JVM', n.jvm || n.agent_id],
    ]);
  }

  onLeave() {
    this.hover = -1;
    this.tip.hide();
    this.scroller.redraw();
  }

  onDown(ev) {
    if (ev.button !== 0) return;
    const {x} = this.scroller.point(ev);
    if (x < LABEL) return;
    this.drag = {x0: x, x1: x};
    ev.preventDefault();
  }

  onMouseUp(ev) {
    const drag = this.drag;
    if (!drag) return;
    this.drag = null;
    if (Math.abs(drag.x1 - drag.x0) >= 4) {
      const sc = this.xScale(this.scroller.box.clientWidth);
      const a = sc.toT(Math.min(drag.x0, drag.x1));
      const b = sc.toT(Math.max(drag.x0, drag.x1));
      this.setRange(Math.max(this.tMin, a), Math.min(this.tMax, b));
      return;
    }
    if (ev.target !== this.scroller.canvas) return;
    const i = this.nodeAt(ev);
    this.scroller.redraw();
    if (i >= 0) {
      this.selected = i;
      this.onSelect(i);
    }
  }

  destroy() {
    window.removeEventListener('mouseup', this.onUp);
    this.tip.destroy();
    this.scroller.destroy();
  }
}

function niceStep(raw) {
  const p = 10 ** Math.floor(Math.log10(Math.max(raw, 1e-9)));
  const m = raw / p;
  return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
}

function cut(ctx, text, max) {
  if (ctx.measureText(text).width <= max) return text;
  let lo = 0;
  let hi = text.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (ctx.measureText(`${text.slice(0, mid)}…`).width <= max)
      lo = mid;
    else
      hi = mid - 1;
  }
  return `${text.slice(0, lo)}…`;
}
