// api.js - the one way views talk to cmr-ui: JSON over fetch, errors as ApiError.
//
//   import { api } from './api.js';
//   const list = await api.get('/api/traces', { limit: 100, min_duration: '5ms' });
//   await api.post('/api/diagnoses', { environment: 'demo', method: 'a.B.c' });
//
// Query values that are undefined, null or '' are left out. Every POST carries the header
// cmr-ui requires of writes (X-CMR-Request), so a page of another origin cannot write.

export class ApiError extends Error {
  constructor(status, message, body) {
    super(message);
    this.status = status;
    this.body = body;
  }
}

function url(path, query) {
  const u = new URL(path, location.origin);
  if (query)
    for (const [k, v] of Object.entries(query))
      if (v !== undefined && v !== null && v !== '') u.searchParams.set(k, String(v));
  return u.pathname + u.search;
}

async function answer(res) {
  const text = await res.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (!res.ok) {
    const msg = body && body.error ? body.error : `${res.status} ${res.statusText}`;
    throw new ApiError(res.status, msg, body);
  }
  return body;
}

export const api = {
  url,
  async get(path, query, {signal} = {}) {
    return answer(await fetch(url(path, query), {signal, headers: {Accept: 'application/json'}}));
  },
  // body: an object (sent as JSON) or a string (sent as contentType, default YAML)
  async post(path, body, contentType) {
    const isText = typeof body === 'string';
    const res = await fetch(url(path), {
      method: 'POST',
      headers: {
        Accept: 'application/json',
        'Content-Type': isText ? contentType || 'application/yaml' : 'application/json',
        'X-CMR-Request': '1',
      },
      body: isText ? body : JSON.stringify(body ?? {}),
    });
    return answer(res);
  },
};
