// What a trace lost (issue 15): the agents record whole traces or none, and a segment that
// did not record calls (its size limit, a full ring) is truncated, with the count; a trace
// not complete yet is "arriving" for a while, then "partial". And what
// an answer lacks: with several ingest workers, a list whose partitions' owner did not
// answer says so ("partial", "partitions_unreachable", "errors": docs/INGEST.md).
import {h} from './dom.js';
import * as fmt from './format.js';

// " (the segment size limit and a full ring)", or '' when the reason is not known.
export function truncatedWhy(t) {
  const why = (t.truncated_by || []).map((w) => w === 'size_limit' ? 'the segment size limit' : 'a full ring');
  return why.length ? ` (${why.join(' and ')})` : '';
}

// A badge "truncated N" for a trace whose segments did not record N calls; null otherwise.
export function truncatedBadge(t) {
  if (!t.truncated) return null;
  const n = t.calls_not_recorded || 0;
  return h(
      'span', {
        class: 'badge warn tl-truncated',
        title: `truncated: ${fmt.count(n)} call${n === 1 ? '' : 's'} not recorded, with everything they called${
            truncatedWhy(t)}`
      },
      `truncated ${fmt.count(n)}`);
}

// How complete a trace reads at nowMs: 'complete'; 'arriving' while it is not and its last
// event is less than ARRIVING_MS old (segments of other threads and JVMs are sent as they
// end, and may still be on their way); 'partial' after that (something did not arrive).
export const ARRIVING_MS = 30000;
export function completeness(t, nowMs = Date.now()) {
  if (t.complete) return 'complete';
  const endMs = (Number(t.start_ns) + Number(t.duration_ns || 0)) / 1e6;
  return nowMs - endMs < ARRIVING_MS ? 'arriving' : 'partial';
}

const COMPLETENESS = {
  complete: ['badge good', 'every segment of the trace has arrived'],
  arriving: ['badge info', 'it ended less than 30 s ago: some of its segments have not arrived yet'],
  partial: ['badge warn', 'some segments or batches of this trace are missing'],
};

// The badge of completeness(t, nowMs).
export function completenessBadge(t, nowMs = Date.now()) {
  const state = completeness(t, nowMs);
  const [cls, title] = COMPLETENESS[state];
  return h('span', {class: cls, title}, state);
}

// A note "incomplete: partitions 3 and 7 did not answer (why)" for an answer of several
// ingest workers that lacks some partitions; null for a complete one.
export function unreachableNote(r) {
  if (!r || !r.partial) return null;
  const parts = (r.partitions_unreachable || []).slice().sort((a, b) => a - b);
  const why = [...new Set((r.errors || []).map((e) => e.error).filter(Boolean))];
  const list = parts.length > 8 ? `${parts.slice(0, 8).join(', ')} and ${parts.length - 8} more` : parts.join(', ');
  return h(
      'div', {class: 'partial-note', role: 'status'},
      `Incomplete: the ingest worker${parts.length === 1 ? '' : 's'} owning partition${parts.length === 1 ? '' : 's'} ${
          list} did not answer, so what they hold is missing here${
          why.length ? ` (${why.slice(0, 3).join('; ')})` : ''}.`);
}
