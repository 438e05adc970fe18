// virtual.js - a fixed-row-height virtual scroller: only the rows in view (plus a few) exist
// in the DOM, so a list of 100,000 rows scrolls as smoothly as one of 100.
//
//   const list = new VirtualList(viewportEl, {
//     rowHeight: 24,
//     count: rows.length,
//     header: headEl,                 // optional, kept at the top (position: sticky)
//     create: () => h('div', { class: 'row' }),   // one pooled row element
//     render: (el, index) => { ... },  // fill a pooled element for row `index`
//   });
//   list.setCount(n); list.refresh(); list.scrollToIndex(i); list.destroy();
//
// viewportEl must have a bounded height and overflow: auto. Rows are absolutely positioned
// inside a sizer as tall as all the rows; scrolling reuses the pooled elements. refresh()
// re-renders the rows in view (after the data behind them changed); nothing else does.

export class VirtualList {
  constructor(viewport, {rowHeight, count = 0, create, render, header = null, overscan = 6}) {
    this.viewport = viewport;
    this.rowHeight = rowHeight;
    this.count = count;
    this.create = create;
    this.render = render;
    this.overscan = overscan;
    this.pool = [];
    this.frame = 0;
    viewport.classList.add('vlist');
    if (header) {
      header.classList.add('vlist-head');
      viewport.append(header);
    }
    this.sizer = document.createElement('div');
    this.sizer.className = 'vlist-sizer';
    this.sizer.style.position = 'relative';
    viewport.append(this.sizer);
    this.onScroll = () => this.schedule(false);
    viewport.addEventListener('scroll', this.onScroll, {passive: true});
    this.resizer = new ResizeObserver(() => this.schedule(false));
    this.resizer.observe(viewport);
    this.setCount(count);
  }

  // Rows now number n (the data may have changed too: every row in view is redrawn).
  setCount(n) {
    this.count = n;
    this.sizer.style.height = `${n * this.rowHeight}px`;
    this.update(true);
  }

  refresh() {
    this.update(true);
  }

  schedule(force) {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.update(force);
    });
  }

  visibleRange() {
    const top = this.viewport.scrollTop - this.sizer.offsetTop;
    const first = Math.max(0, Math.floor(top / this.rowHeight) - this.overscan);
    const rows = Math.ceil(this.viewport.clientHeight / this.rowHeight) + 2 * this.overscan;
    return [first, Math.min(this.count, first + rows)];
  }

  update(force) {
    const [first, last] = this.visibleRange();
    this.growPool(last - first);
    for (let k = 0; k < this.pool.length; k++) {
      const el = this.pool[k];
      const i = first + k;
      if (i >= last) {
        if (el.vIndex !== -1) {
          el.style.display = 'none';
          el.vIndex = -1;
        }
        continue;
      }
      if (el.vIndex === -1) el.style.display = '';
      if (force || el.vIndex !== i) {
        el.vIndex = i;
        el.style.transform = `translateY(${i * this.rowHeight}px)`;
        this.render(el, i);
      }
    }
  }

  growPool(n) {
    while (this.pool.length < n) {
      const el = this.create();
      el.classList.add('vlist-row');
      el.style.position = 'absolute';
      el.style.left = '0';
      el.style.right = '0';
      el.style.top = '0';
      el.style.height = `${this.rowHeight}px`;
      el.vIndex = -1;
      el.style.display = 'none';
      this.sizer.append(el);
      this.pool.push(el);
    }
  }

  // The row index under a client y coordinate, or -1.
  indexAt(clientY) {
    const y = clientY - this.sizer.getBoundingClientRect().top;
    const i = Math.floor(y / this.rowHeight);
    return i >= 0 && i < this.count ? i : -1;
  }

  // Scrolls so row i is in view: 'nearest' moves as little as possible, 'center' centres it.
  scrollToIndex(i, align = 'nearest') {
    const vp = this.viewport;
    const head = this.sizer.offsetTop;
    const y = head + i * this.rowHeight;
    const view = vp.clientHeight - head;
    if (align === 'center')
      vp.scrollTop = Math.max(0, y - head - view / 2 + this.rowHeight / 2);
    else if (y < vp.scrollTop + head)
      vp.scrollTop = y - head;
    else if (y + this.rowHeight > vp.scrollTop + vp.clientHeight)
      vp.scrollTop = y + this.rowHeight - vp.clientHeight;
    this.update(false);
  }

  destroy() {
    cancelAnimationFrame(this.frame);
    this.viewport.removeEventListener('scroll', this.onScroll);
    this.resizer.disconnect();
    this.pool = [];
  }
}
