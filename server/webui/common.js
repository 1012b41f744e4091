// Shared by the chat and status pages: building DOM nodes, the API key
// (kept in this browser's localStorage and sent with every API call as
// `Authorization: Bearer`), the form that asks for it when the server
// answers 401, and number formatting. No HTML string is ever parsed: every
// node is made with createElement and every text with a text node.

const KEY_STORE = 'qwen3d.apiKey';

// el('div', {class: 'x', onclick: f}, child, 'text', ...): a new element.
export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null || c === false) continue;
    e.append(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
  }
  return e;
}

export function storageGet(key, fallback) {
  try {
    const v = localStorage.getItem(key);
    return v === null ? fallback : JSON.parse(v);
  } catch {
    return fallback;
  }
}

// False when the browser refused (quota, or storage disabled).
export function storageSet(key, value) {
  try {
    localStorage.setItem(key, JSON.stringify(value));
    return true;
  } catch {
    return false;
  }
}

export function apiKey() {
  return storageGet(KEY_STORE, '');
}

export function setApiKey(key) {
  if (key) storageSet(KEY_STORE, key);
  else localStorage.removeItem(KEY_STORE);
}

let onAuthRequired = () => {};

// fetch() of an API path with the key; a 401 shows the key form.
export async function api(path, init = {}) {
  const headers = new Headers(init.headers || {});
  const key = apiKey();
  if (key) headers.set('Authorization', 'Bearer ' + key);
  const res = await fetch(path, { ...init, headers, cache: 'no-store' });
  if (res.status === 401) onAuthRequired();
  return res;
}

// The message of an error response's JSON body, or its status line.
export async function errorText(res) {
  let msg = '';
  try {
    const j = await res.json();
    msg = j && j.error && j.error.message ? j.error.message : '';
  } catch {
    // not JSON: the status says it
  }
  return `${res.status} ${res.statusText || ''}`.trim() + (msg ? ': ' + msg : '');
}

// Wires the page's #key-form: shown on a 401 (or now when SHOW), it saves
// the key and calls ONSAVED.
export function setupKeyForm(onSaved, show = false) {
  const form = document.getElementById('key-form');
  const input = document.getElementById('key-input');
  onAuthRequired = () => {
    form.hidden = false;
    input.focus();
  };
  if (show) onAuthRequired();
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    setApiKey(input.value.trim());
    input.value = '';
    form.hidden = true;
    onSaved();
  });
}

export function fmtBytes(n) {
  if (n === null || n === undefined) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return (i === 0 ? String(n) : n.toFixed(n < 10 ? 2 : n < 100 ? 1 : 0)) + ' ' + units[i];
}

// A number with at most 3 significant digits after the point, or a dash.
export function fmtNum(x, digits = 3) {
  if (x === null || x === undefined || Number.isNaN(x)) return '–';
  if (Math.abs(x) >= 100) return Math.round(x).toLocaleString('en-US');
  return String(Number(x.toPrecision(digits)));
}

export function fmtDuration(s) {
  if (s < 60) return `${Math.round(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

// Replaces the children of a <dl> with term/value pairs.
export function fillList(dl, rows) {
  dl.replaceChildren(...rows.filter(Boolean).flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
}
