// m-chart.js - time-series charts on uPlot for the metrics view.
//
//   const c = timeChart(el, {
//     xs: [ms, ...],                                   // bucket start times
//     series: [{ label, color, values: [...], dash, fill, bars }],
//     yFormat: (v) => '12 ms',                         // axis and legend values
//     bands: [{ from: ms, to: ms, label }],            // shaded intervals (abnormal)
//     height: 220,
//   });
//   c.destroy();
//
// The chart follows its container's width (a ResizeObserver). Gaps longer than one bucket
// become breaks in the lines (nulls), so a JVM that was away does not draw a straight line.
import uPlot from '/vendor/uplot/uPlot.esm.js';

import {time} from './format.js';

const AXIS = {
  stroke: '#667085',
  grid: {stroke: '#eef0f3', width: 1},
  ticks: {stroke: '#e3e6eb', width: 1},
  font: '11px system-ui, sans-serif'
};

export function timeChart(el, opts) {
  const {xs, series, yFormat = String, bands = [], height = 220, resMs} = opts;
  const data = withGaps(xs, series.map((s) => s.values), resMs);
  const u = new uPlot(options(el, series, yFormat, bands, height), data, el);
  const ro = new ResizeObserver(() => {
    const w = Math.max(200, el.clientWidth);
    if (Math.abs(w - u.width) > 2) u.setSize({width: w, height});
  });
  ro.observe(el);
  return {
    destroy() {
      ro.disconnect();
      u.destroy();
    },
  };
}

function options(el, series, yFormat, bands, height) {
  return {
    width: Math.max(200, el.clientWidth || 600),
    height,
    scales: {x: {time: true}, y: {range: (u, min, max) => [0, max > 0 ? max * 1.1 : 1]}},
    series: [
      {value: (u, v) => (v == null ? '—' : time(v * 1000).slice(0, 19))}, ...series.map((s) => seriesOpts(s, yFormat))
    ],
    axes: [
      {...AXIS, space: 64, values: timeTicks}, {...AXIS, size: 64, values: (u, vals) => vals.map((v) => yFormat(v))}
    ],
    legend: {live: true},
    cursor: {points: {size: 6}, drag: {x: true, y: false}},
    hooks: {drawClear: [(u) => drawBands(u, bands)]},
  };
}

// Time axis labels as the rest of the UI writes times (24-hour, format.js time()): "14:05",
// "14:05:30" when ticks are less than a minute apart, "14:05:30.500" under a second (a
// zoom), the date and minute ("11-30 00:00") where the day changes (the view's header says
// the window's dates), the whole date when ticks are a day or more apart. uPlot's time
// scale is in seconds; incr is the ticks' spacing.
export function timeTicks(u, splits, axisIdx, space, incr) {
  let day = null;
  return splits.map((v) => {
    const t = time(v * 1000);  // "2026-11-30 00:05:30.000"
    const d = t.slice(5, 10);
    if (incr >= 86400) return t.slice(0, 10);
    const label = day !== null && d !== day ? `${d} ${t.slice(11, 16)}` :
                                              t.slice(
                                                  11,
                                                  incr < 1      ? 23 :
                                                      incr < 60 ? 19 :
                                                                  16);
    day = d;
    return label;
  });
}

function seriesOpts(s, yFormat) {
  const o = {
    label: s.label,
    stroke: s.color,
    width: s.width || 1.5,
    value: (u, v) => (v == null ? '—' : yFormat(v)),
    points: {show: false},
    spanGaps: false,
  };
  if (s.dash) o.dash = s.dash;
  if (s.fill) o.fill = s.fill;
  if (s.bars) {
    o.paths = uPlot.paths.bars({size: [0.7, 40]});
    o.fill = s.fill || s.color;
    o.width = 0;
  }
  return o;
}

// Shaded intervals under the series, clipped to the plot area, with their label on top.
function drawBands(u, bands) {
  if (!bands.length) return;
  const ctx = u.ctx;
  const {left, top, width, height} = u.bbox;
  ctx.save();
  ctx.beginPath();
  ctx.rect(left, top, width, height);
  ctx.clip();
  for (const b of bands) {
    const x0 = Math.max(left, u.valToPos(b.from / 1000, 'x', true));
    const x1 = Math.min(left + width, u.valToPos(b.to / 1000, 'x', true));
    if (x1 <= x0) continue;
    ctx.fillStyle = 'rgba(220, 38, 38, 0.10)';
    ctx.fillRect(x0, top, x1 - x0, height);
    ctx.fillStyle = 'rgba(220, 38, 38, 0.9)';
    ctx.fillRect(x0, top, Math.max(1, devicePixelRatio), height);
    if (b.label) {
      ctx.font = `${11 * devicePixelRatio}px system-ui, sans-serif`;
      ctx.fillText(b.label, x0 + 4 * devicePixelRatio, top + 12 * devicePixelRatio);
    }
  }
  ctx.restore();
}

// uPlot's data: [xs in seconds, ...ys], with a null after every point followed by a gap
// longer than one bucket.
function withGaps(xs, ys, resMs) {
  const outX = [];
  const outY = ys.map(() => []);
  for (let i = 0; i < xs.length; i++) {
    outX.push(xs[i] / 1000);
    ys.forEach((y, j) => outY[j].push(y[i] ?? null));
    if (resMs && i + 1 < xs.length && xs[i + 1] - xs[i] > resMs * 1.5) {
      outX.push((xs[i] + resMs) / 1000);
      ys.forEach((y, j) => outY[j].push(null));
    }
  }
  return [outX, ...outY];
}
