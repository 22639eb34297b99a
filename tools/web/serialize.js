// The value of a web_execute_js script as plain data for the model, called on the value
// (`this`) in the page's main world, where the value lives. It relies on language syntax
// (typeof, loops, for-in) rather than the builtins a page may replace (Array.prototype.map,
// Array.from, Object.keys, JSON, Set), so a page's polyfills cannot change what the model
// is told. Elements come back as outerHTML, NodeLists as arrays, window as [Window url].
// The caller sets the caps: `limits` {items, keys, depth, html, chars}, `chars` roughly
// bounding the whole value's text, and how a cut is marked: `limits.cuts` {mark, marks,
// margin}, as extract.js does (the page never holds a secret, so it cannot cut around one:
// `margin` chars past each cut come back in `tails` for Python to mask, then cut; a page
// that replaces the string builtins a cut uses spoils only its own text, which it writes
// anyway). Returns {value, tails}.
function (limits) {
  const ITEMS_MAX = limits.items, KEYS_MAX = limits.keys, DEPTH_MAX = limits.depth;
  const HTML_CHARS = limits.html, CHARS_MAX = limits.chars, CUTS = limits.cuts;
  const seen = [], tails = [];
  const own = Object.prototype.hasOwnProperty;
  let size = 0;  // chars of text so far

  function cut(s) {
    if (s.length <= HTML_CHARS) return s;
    let at = HTML_CHARS - 1;
    const code = s.charCodeAt(at - 1);
    if (code >= 0xD800 && code < 0xDC00) at--;  // never half a surrogate pair
    const i = tails.length < CUTS.marks ? tails.length : CUTS.marks;
    if (i < CUTS.marks) tails[i] = s.substring(at, at + CUTS.margin);
    return s.substring(0, at) + String.fromCodePoint(CUTS.mark + i);
  }
  const full = () => size > CHARS_MAX;

  function isSeen(v) {
    for (let i = 0; i < seen.length; i++) if (seen[i] === v) return true;
    return false;
  }

  function items(v, depth, read) {  // read(i) for 0 <= i < v.length
    const out = [];
    const n = v.length;
    let i = 0;
    for (; i < n && i < ITEMS_MAX && !full(); i++) out[i] = ser(read(i), depth + 1);
    if (i < n) out[out.length] = '… ' + (n - i) + ' more items';
    return out;
  }

  function collection(v, depth, entries) {  // a Map (entries) or a Set
    const out = [];
    let n = 0;
    v.forEach((value, key) => {
      n++;
      if (out.length < ITEMS_MAX && !full()) {
        out[out.length] = entries ? [ser(key, depth + 1), ser(value, depth + 1)]
          : ser(value, depth + 1);
      }
    });
    if (n > out.length) out[out.length] = '… ' + (n - out.length) + ' more items';
    return out;
  }

  function node(n) {
    if (n.nodeType === 1) return cut(n.outerHTML);
    if (n.nodeType === 3) return n.data;
    if (n.nodeType === 9) return '[Document ' + n.URL + ']';
    return '[' + n.nodeName + ']';
  }

  function fields(v, depth) {
    const out = {};
    let n = 0, kept = 0;
    for (const k in v) {
      if (!own.call(v, k)) continue;
      n++;
      if (kept >= KEYS_MAX || full()) continue;
      kept++;
      size += k.length;
      try { out[k] = ser(v[k], depth + 1); } catch (e) { out[k] = '[' + e.name + ']'; }
    }
    if (n > kept) out['…'] = (n - kept) + ' more keys';
    return out;
  }

  function ser(v, depth) {
    const out = value(v, depth);
    size += typeof out === 'string' ? out.length + 2 : 4;
    return out;
  }

  function value(v, depth) {
    if (v === null || v === undefined) return null;
    const t = typeof v;
    if (t === 'number') return v === v && v !== Infinity && v !== -Infinity ? v : '' + v;
    if (t === 'string' || t === 'boolean') return v;
    if (t === 'bigint') return '' + v;
    if (t === 'symbol') return '[Symbol]';
    if (t === 'function') return '[Function ' + (v.name || 'anonymous') + ']';
    if (v.window === v) {
      try { return '[Window ' + v.location.href + ']'; } catch (e) { return '[Window]'; }
    }
    if (typeof v.nodeType === 'number' && typeof v.nodeName === 'string') return node(v);
    if (depth >= DEPTH_MAX) return '[…]';
    if (isSeen(v)) return '[Circular]';
    seen[seen.length] = v;
    if (v instanceof Date) return v.getTime() === v.getTime() ? v.toISOString() : 'Invalid Date';
    if (v instanceof Error) return v.name + ': ' + v.message;
    if (v instanceof RegExp) return '' + v;
    if (v instanceof Map) return collection(v, depth, true);
    if (v instanceof Set) return collection(v, depth, false);
    if (Array.isArray(v) || ArrayBuffer.isView(v) ||
        (typeof v.length === 'number' && typeof v.item === 'function')) {
      return items(v, depth, (i) => v[i]);
    }
    return fields(v, depth);
  }

  const out = ser(this, 0);
  return {value: out, tails: tails};
}
