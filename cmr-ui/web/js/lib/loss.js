// What a trace lost (issue 15): the agents record whole traces or none, and a segment that
// did not record calls (its size limit, a full ring) is truncated, with the count. And what
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
