// tr-canvas.js - what the canvas views of traces share (flame graph, waterfall):
//
//   CanvasScroller  a scrolling box with a canvas the size of the box that stays in view;
//                   the content may be far taller than the box: draw() gets the scroll
//                   offset and paints only what is visible (high-DPI aware, redraws on
//                   scroll and resize, at most once a frame)
//   Tooltip         one floating box of text lines next to the mouse
//   packageColor    a stable colour per Java package (same package, same colour everywhere)

import {clear, h} from './dom.js';

export class CanvasScroller {
  // draw(ctx, width, height, scrollTop); contentHeight() in CSS pixels
  constructor(container, {draw, contentHeight}) {
    this.draw = draw;
    this.contentHeight = contentHeight;
    this.box = h('div', {class: 'cv-scroll'});
    this.canvas = h('canvas', {class: 'cv-canvas'});
    this.spacer = h('div', {class: 'cv-spacer'});
    this.box.append(this.canvas, this.spacer);
    container.append(this.box);
    this.ctx = this.canvas.getContext('2d');
    this.frame = 0;
    this.onScroll = () => this.redraw();
    this.box.addEventListener('scroll', this.onScroll, {passive: true});
    this.resizer = new ResizeObserver(() => this.redraw());
    this.resizer.observe(this.box);
  }

  redraw() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.paint();
    });
  }

  paint() {
    const w = this.box.clientWidth;
    const hgt = this.box.clientHeight;
    if (!w || !hgt) return;
    const dpr = window.devicePixelRatio || 1;
    const content = Math.max(hgt, this.contentHeight());
    this.spacer.style.height = `${Math.max(0, content - hgt)}px`;
    if (this.canvas.width !== Math.round(w * dpr) || this.canvas.height !== Math.round(hgt * dpr)) {
      this.canvas.width = Math.round(w * dpr);
      this.canvas.height = Math.round(hgt * dpr);
      this.canvas.style.width = `${w}px`;
      this.canvas.style.height = `${hgt}px`;
    }
    const ctx = this.ctx;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, hgt);
    this.draw(ctx, w, hgt, this.box.scrollTop);
  }

  // Mouse position inside the content (x, y with the scroll offset added).
  point(ev) {
    const r = this.canvas.getBoundingClientRect();
    return {x: ev.clientX - r.left, y: ev.clientY - r.top + this.box.scrollTop, viewY: ev.clientY - r.top};
  }

  destroy() {
    cancelAnimationFrame(this.frame);
    this.resizer.disconnect();
    this.box.removeEventListener('scroll', this.onScroll);
  }
}

export class Tooltip {
  constructor() {
    this.el = h('div', {class: 'cv-tip', role: 'tooltip'});
    this.el.style.display = 'none';
    document.body.append(this.el);
  }

  // lines: [string | [label, value]]; the first line is the title.
  show(ev, lines) {
    clear(this.el);
    lines.forEach((l, i) => {
      if (Array.isArray(l))
        this.el.append(h('div', {class: 'cv-tip-row'}, h('span', null, l[0]), h('b', null, l[1])));
      else
        this.el.append(h('div', {class: i === 0 ? 'cv-tip-title' : 'cv-tip-note'}, l));
    });
    this.el.style.display = 'block';
    const pad = 14;
    const r = this.el.getBoundingClientRect();
    let x = ev.clientX + pad;
    let y = ev.clientY + pad;
    if (x + r.width > window.innerWidth - 4) x = ev.clientX - r.width - pad;
    if (y + r.height > window.innerHeight - 4) y = ev.clientY - r.height - pad;
    this.el.style.left = `${Math.max(4, x)}px`;
    this.el.style.top = `${Math.max(4, y)}px`;
  }

  hide() {
    this.el.style.display = 'none';
  }

  destroy() {
    this.el.remove();
  }
}

// The package of "a.b.C.m(desc)" ("a.b"), or the class for classes in no package.
export function packageOf(full) {
  const p = full.indexOf('(');
  const head = p >= 0 ? full.slice(0, p) : full;
  const m = head.lastIndexOf('.');
  const cls = m >= 0 ? head.slice(0, m) : head;
  const c = cls.lastIndexOf('.');
  return c >= 0 ? cls.slice(0, c) : cls;
}

function hash(s) {
  let x = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    x ^= s.charCodeAt(i);
    x = Math.imul(x, 0x01000193);
  }
  return x >>> 0;
}

const colorCache = new Map();

// { fill, dark } for a method: hue from its package; JDK packages in greys-blues.
export function packageColor(full) {
  const pkg = packageOf(full || '');
  let c = colorCache.get(pkg);
  if (!c) {
    const x = hash(pkg);
    const jdk = /^(java|javax|jdk|sun|com\.sun)\b/.test(pkg);
    const hue = jdk ? 200 + (x % 30) : x % 360;
    const sat = jdk ? 18 : 55 + ((x >>> 9) % 20);
    const light = jdk ? 78 : 72 + ((x >>> 17) % 8);
    c = {fill: `hsl(${hue} ${sat}% ${light}%)`, dark: `hsl(${hue} ${sat + 10}% ${light - 28}%)`};
    colorCache.set(pkg, c);
  }
  return c;
}

// Text cut to fit maxWidth with an ellipsis ('' when not even 3 characters fit).
export function fitText(ctx, text, maxWidth, charWidth) {
  if (maxWidth < charWidth * 3) return '';
  const n = Math.floor(maxWidth / charWidth);
  if (text.length <= n) return text;
  return `${text.slice(0, Math.max(1, n - 1))}…`;
}
