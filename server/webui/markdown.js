// Markdown to DOM for the model's answers, safe by construction: the text
// is never parsed as HTML. Every node is a text node or an element from a
// fixed set, made with createElement; the only attributes are classes
// from a fixed set, `start` of an ordered list, and `href` of a link whose
// URL parses as absolute http, https or mailto (anything else stays text).
// Raw HTML in the input is shown as text, and images become links, so an
// answer cannot load anything.
//
// Covered: paragraphs with hard line breaks, ATX headings, fenced code
// blocks (an unclosed fence runs to the end, as while streaming), block
// quotes, nested bullet and ordered lists, GFM tables, thematic breaks;
// inline code, strong, emphasis, strikethrough, links, <autolinks>, bare
// http(s) URLs and backslash escapes. A search for a closing delimiter
// that failed is not repeated from later in the same text, and a link's
// brackets are looked for within LINK_SPAN characters, so hostile text
// cannot make a render quadratic; nesting stops at MAX_DEPTH.

import { el } from './common.js';

const SCHEMES = new Set(['http:', 'https:', 'mailto:']);
const PUNCT = '!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~';
const MAX_DEPTH = 16;
const LINK_SPAN = 4096;

const FENCE_RE = /^ {0,3}(`{3,}|~{3,})[ \t]*([^`\s]*)/;
const HEADING_RE = /^ {0,3}(#{1,6})(?:[ \t]+(.*))?$/;
const HR_RE = /^ {0,3}(?:(?:\*[ \t]*){3,}|(?:-[ \t]*){3,}|(?:_[ \t]*){3,})$/;
const QUOTE_RE = /^ {0,3}>/;
const LIST_RE = /^( {0,3})([-*+]|\d{1,9}[.)])(?:[ \t]+|$)/;
const SEP_CELL_RE = /^:?-+:?$/;

export function renderMarkdown(src) {
  const frag = document.createDocumentFragment();
  frag.append(...blocks(String(src).replace(/\r\n?/g, '\n').split('\n'), 0));
  return frag;
}

// The URL when it is absolute http, https or mailto; else null.
export function safeUrl(raw) {
  try {
    const u = new URL(raw);
    return SCHEMES.has(u.protocol) ? u.href : null;
  } catch {
    return null;
  }
}

const blank = (line) => line.trim() === '';
const indentOf = (line) => line.length - line.replace(/^[ \t]+/, '').length;

function splitRow(line) {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  const cells = [];
  let cur = '';
  for (let i = 0; i < s.length; i++) {
    if (s[i] === '\\' && s[i + 1] === '|') {
      cur += '|';
      i++;
    } else if (s[i] === '|') {
      cells.push(cur.trim());
      cur = '';
    } else {
      cur += s[i];
    }
  }
  cells.push(cur.trim());
  return cells;
}

function isTableStart(lines, i) {
  if (i + 1 >= lines.length || !lines[i].includes('|') || !lines[i + 1].includes('-')) return false;
  const sep = splitRow(lines[i + 1]);
  return sep.every((c) => SEP_CELL_RE.test(c)) && sep.length === splitRow(lines[i]).length;
}

function startsBlock(lines, i) {
  const l = lines[i];
  return FENCE_RE.test(l) || HEADING_RE.test(l) || HR_RE.test(l) || QUOTE_RE.test(l) || LIST_RE.test(l) ||
    isTableStart(lines, i);
}

function blocks(lines, depth) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (blank(line)) {
      i++;
    } else if ((m = FENCE_RE.exec(line)) && !(m[1][0] === '`' && line.slice(m[0].length).includes('`'))) {
      const fence = m[1], strip = indentOf(line);
      const body = [];
      for (i++; i < lines.length; i++) {
        const t = lines[i].trim();
        if (t.length >= fence.length && t === fence[0].repeat(t.length) && indentOf(lines[i]) < 4) {
          i++;
          break;
        }
        body.push(lines[i].slice(Math.min(strip, indentOf(lines[i]))));
      }
      out.push(codeBlock(body.join('\n'), m[2]));
    } else if ((m = HEADING_RE.exec(line))) {
      out.push(el('h' + m[1].length, {}, inline(headingText(m[2] || ''), depth)));
      i++;
    } else if (HR_RE.test(line)) {
      out.push(el('hr'));
      i++;
    } else if (QUOTE_RE.test(line)) {
      const body = [];
      for (; i < lines.length && QUOTE_RE.test(lines[i]); i++) body.push(lines[i].replace(/^ {0,3}> ?/, ''));
      out.push(depth < MAX_DEPTH ? el('blockquote', {}, blocks(body, depth + 1)) : el('p', {}, body.join('\n')));
    } else if (LIST_RE.test(line)) {
      i = list(lines, i, out, depth);
    } else if (isTableStart(lines, i)) {
      i = table(lines, i, out, depth);
    } else {
      const para = [line.trim()];
      for (i++; i < lines.length && !blank(lines[i]) && !startsBlock(lines, i); i++) para.push(lines[i].trim());
      out.push(el('p', {}, inline(para.join('\n'), depth)));
    }
  }
  return out;
}

// A heading's text without its closing run of '#'.
function headingText(s) {
  let t = s.trimEnd(), j = t.length;
  while (j > 0 && t[j - 1] === '#') j--;
  if (j < t.length && (j === 0 || t[j - 1] === ' ' || t[j - 1] === '\t')) t = t.slice(0, j).trimEnd();
  return t;
}

function codeBlock(code, lang) {
  const cls = /^[\w+#.-]{1,32}$/.test(lang) ? 'language-' + lang : null;
  const head = el('div', { class: 'code-head' }, el('span', {}, cls ? lang : ''));
  if (navigator.clipboard) {
    head.append(el('button', {
      type: 'button',
      class: 'copy',
      onclick: (ev) => {
        navigator.clipboard.writeText(code).then(() => {
          ev.target.textContent = 'Copied';
          setTimeout(() => { ev.target.textContent = 'Copy'; }, 1500);
        }, () => {});
      },
    }, 'Copy'));
  }
  return el('div', { class: 'code' }, head, el('pre', {}, el('code', { class: cls }, code)));
}

function list(lines, i, out, depth) {
  const first = LIST_RE.exec(lines[i]);
  const ordered = /\d/.test(first[2]);
  const items = [];
  let cur = null;
  while (i < lines.length) {
    const line = lines[i];
    const m = LIST_RE.exec(line);
    if (m && (!cur || indentOf(line) < cur.indent)) {
      if (/\d/.test(m[2]) !== ordered) break;
      cur = { indent: m[0].length, lines: [line.slice(m[0].length)], loose: false };
      items.push(cur);
      i++;
    } else if (blank(line)) {
      let j = i + 1;
      while (j < lines.length && blank(lines[j])) j++;
      if (j >= lines.length || indentOf(lines[j]) < cur.indent) break;
      for (; i < j; i++) cur.lines.push('');
      cur.loose = true;
    } else if (indentOf(line) >= cur.indent) {
      cur.lines.push(line.slice(cur.indent));
      i++;
    } else if (!startsBlock(lines, i)) {
      cur.lines.push(line.trim()); // a lazy continuation of the item's paragraph
      i++;
    } else {
      break;
    }
  }
  const start = ordered ? parseInt(first[2], 10) : 1;
  const node = el(ordered ? 'ol' : 'ul', { start: ordered && start !== 1 ? start : null });
  for (const it of items) {
    const body = depth < MAX_DEPTH ? blocks(it.lines, depth + 1) : [document.createTextNode(it.lines.join('\n'))];
    // A tight item shows its paragraphs' text directly.
    node.append(el('li', {}, it.loose ? body : body.flatMap((b) => (b.tagName === 'P' ? [...b.childNodes] : [b]))));
  }
  out.push(node);
  return i;
}

function table(lines, i, out, depth) {
  const align = splitRow(lines[i + 1]).map((c) =>
    c.startsWith(':') && c.endsWith(':') ? 'al-center' : c.endsWith(':') ? 'al-right' : null);
  const row = (cells, tag) => el('tr', {}, align.map((a, k) => el(tag, { class: a }, inline(cells[k] || '', depth))));
  const head = el('thead', {}, row(splitRow(lines[i]), 'th'));
  const body = el('tbody');
  for (i += 2; i < lines.length && !blank(lines[i]) && lines[i].includes('|'); i++) body.append(row(splitRow(lines[i]), 'td'));
  out.push(el('div', { class: 'table-wrap' }, el('table', {}, head, body)));
  return i;
}

// ---- inline ------------------------------------------------------------------

const isSpace = (c) => c === undefined || /\s/.test(c);
const isWord = (c) => c !== undefined && /[\p{L}\p{N}]/u.test(c);

function runLength(s, i, c) {
  let n = 0;
  while (s[i + n] === c) n++;
  return n;
}

// Searches of one text that found nothing: from `key`'s index on, none will.
function memo(failed, key, i, search) {
  if (failed.has(key) && i >= failed.get(key)) return -1;
  const r = search();
  if (r < 0) failed.set(key, i);
  return r;
}

// The index of the next run of exactly N backticks from I, or -1.
function findTicks(s, i, n, failed) {
  return memo(failed, '`' + n, i, () => {
    for (let j = s.indexOf('`', i); j >= 0; j = s.indexOf('`', j)) {
      const k = runLength(s, j, '`');
      if (k === n) return j;
      j += k;
    }
    return -1;
  });
}

// The start of the L delimiters C that close an emphasis whose text starts
// at I, skipping code spans; -1 if none. A closing run is L long, or 3 or
// more (it closes an inner emphasis too).
function findCloser(s, i, c, L, failed) {
  return memo(failed, c + L, i, () => {
    for (let j = i; j < s.length; j++) {
      if (s[j] === '\\') {
        j++;
      } else if (s[j] === '`') {
        const n = runLength(s, j, '`'), e = findTicks(s, j + n, n, failed);
        j = e >= 0 ? e + n - 1 : j + n - 1;
      } else if (s[j] === c) {
        const n = runLength(s, j, c);
        if ((n === L || n >= 3) && j > i && !isSpace(s[j - 1]) && !(c === '_' && isWord(s[j + n]))) return j + n - L;
        j += n - 1;
      }
    }
    return -1;
  });
}

// The index just after the bracket that closes the one at I (OPEN, CLOSE), or -1.
function matching(s, i, open, close) {
  let level = 0;
  for (let j = i; j < s.length && j < i + LINK_SPAN; j++) {
    if (s[j] === '\\') j++;
    else if (s[j] === open) level++;
    else if (s[j] === close && --level === 0) return j + 1;
    else if (s[j] === '\n' && s[j + 1] === '\n') return -1;
  }
  return -1;
}

function link(label, url, depth) {
  const href = safeUrl(url);
  if (!href) return inline(label, depth + 1);
  return [el('a', { href, target: '_blank', rel: 'noopener noreferrer nofollow' }, inline(label, depth + 1))];
}

function inline(s, depth) {
  if (depth > MAX_DEPTH) return [document.createTextNode(s)];
  const out = [], failed = new Map();
  let text = '';
  const flush = () => {
    if (text) out.push(document.createTextNode(text));
    text = '';
  };
  const push = (...nodes) => {
    flush();
    out.push(...nodes);
  };
  for (let i = 0; i < s.length;) {
    const c = s[i];
    if (c === '\\' && PUNCT.includes(s[i + 1])) {
      text += s[i + 1];
      i += 2;
    } else if (c === '\n' || (c === '\\' && s[i + 1] === '\n')) {
      push(el('br'));
      i += c === '\n' ? 1 : 2;
    } else if (c === '`') {
      const n = runLength(s, i, '`'), e = findTicks(s, i + n, n, failed);
      if (e < 0) {
        text += s.slice(i, i + n);
        i += n;
      } else {
        let code = s.slice(i + n, e).replace(/\n/g, ' ');
        if (code.length > 2 && code[0] === ' ' && code[code.length - 1] === ' ' && code.trim()) code = code.slice(1, -1);
        push(el('code', {}, code));
        i = e + n;
      }
    } else if (c === '*' || c === '_' || c === '~') {
      const n = runLength(s, i, c);
      let done = false;
      if (!isSpace(s[i + n]) && !(c === '_' && isWord(s[i - 1]))) {
        for (const L of c === '~' ? [2] : [3, 2, 1]) {
          if (L > n) continue;
          const j = findCloser(s, i + L, c, L, failed);
          if (j < 0) continue;
          const inner = inline(s.slice(i + L, j), depth + 1);
          const node = c === '~' ? el('del', {}, inner) : L === 1 ? el('em', {}, inner) : L === 2 ? el('strong', {}, inner)
            : el('strong', {}, el('em', {}, inner));
          text += s.slice(i, i + n - L);
          push(node);
          i = j + L;
          done = true;
          break;
        }
      }
      if (!done) {
        text += s.slice(i, i + n);
        i += n;
      }
    } else if (c === '[' || (c === '!' && s[i + 1] === '[')) {
      const img = c === '!', b = img ? i + 1 : i;
      const e = matching(s, b, '[', ']');
      const p = e > 0 && s[e] === '(' ? matching(s, e, '(', ')') : -1;
      if (p < 0) {
        text += c;
        i++;
        continue;
      }
      const label = s.slice(b + 1, e - 1);
      let url = s.slice(e + 1, p - 1).trim().split(/\s+/)[0] || '';
      if (url.startsWith('<') && url.endsWith('>')) url = url.slice(1, -1);
      push(...link(img ? 'image: ' + (label || url) : label, url, depth));
      i = p;
    } else if (c === '<' && /^<(?:https?:\/\/|mailto:)[^\s<>]+>/i.test(s.slice(i, i + 2048))) {
      const e = s.indexOf('>', i);
      const url = s.slice(i + 1, e);
      push(...link(url, url, depth));
      i = e + 1;
    } else if ((c === 'h' || c === 'H') && /^https?:\/\//i.test(s.slice(i, i + 8)) && !isWord(s[i - 1])) {
      let e = i;
      while (e < s.length && !/[\s<]/.test(s[e])) e++;
      let url = s.slice(i, e);
      // Trailing punctuation ends the sentence, not the URL; a ')' only when unbalanced.
      for (;;) {
        const last = url[url.length - 1];
        if ('.,:;!?\'"*_~'.includes(last)) url = url.slice(0, -1);
        else if (last === ')' && url.split('(').length < url.split(')').length) url = url.slice(0, -1);
        else break;
      }
      push(...link(url, url, depth));
      i += url.length;
    } else {
      text += c;
      i++;
    }
  }
  flush();
  return out;
}
