// What a trace lost (issue 15): the agents record whole traces or none, and a segment that
// did not record calls (its size limit, a full ring) is truncated, with the count.
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
