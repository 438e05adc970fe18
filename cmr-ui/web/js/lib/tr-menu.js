// tr-menu.js - a small context menu at the mouse (or under the button clicked):
//
//   const menu = new ContextMenu();
//   menu.open(event, [{ label, run }, { sep: true }, ...]);
//
// Closes on a choice, Escape, a click elsewhere, scrolling or resizing.

import {clear, h} from './dom.js';

export class ContextMenu {
  constructor() {
    this.el = h('div', {class: 'tr-menu', role: 'menu'});
    this.el.hidden = true;
    document.body.append(this.el);
    this.onAway = (ev) => {
      if (!this.el.contains(ev.target)) this.close();
    };
    this.onKey = (ev) => {
      if (ev.key === 'Escape') this.close();
    };
    this.onClose = () => this.close();
  }

  open(ev, items) {
    ev.preventDefault();
    ev.stopPropagation();
    clear(this.el);
    for (const it of items) {
      if (it.sep)
        this.el.append(h('div', {class: 'tr-menu-sep'}));
      else
        this.el.append(
            h('button', {
              type: 'button',
              role: 'menuitem',
              onclick: () => {
                this.close();
                it.run();
              }
            },
              it.label),
        );
    }
    this.el.hidden = false;
    const r = this.el.getBoundingClientRect();
    const x = Math.min(ev.clientX, window.innerWidth - r.width - 6);
    const y = ev.clientY + r.height > window.innerHeight - 6 ? ev.clientY - r.height : ev.clientY;
    this.el.style.left = `${Math.max(4, x)}px`;
    this.el.style.top = `${Math.max(4, y)}px`;
    setTimeout(() => {
      document.addEventListener('mousedown', this.onAway, true);
      document.addEventListener('keydown', this.onKey, true);
      window.addEventListener('resize', this.onClose);
      window.addEventListener('wheel', this.onClose, {passive: true});
    });
    const first = this.el.querySelector('button');
    if (first) first.focus();
  }

  close() {
    this.el.hidden = true;
    document.removeEventListener('mousedown', this.onAway, true);
    document.removeEventListener('keydown', this.onKey, true);
    window.removeEventListener('resize', this.onClose);
    window.removeEventListener('wheel', this.onClose);
  }

  destroy() {
    this.close();
    this.el.remove();
  }
}
