// The page-side half of the web tools, loaded once per page (top frame only) into an
// isolated world as window.__ga (the page's own scripts neither see it nor can break it by
// replacing builtins): the page-to-text extractor (scan), the [N] element registry that
// ga(N) asks through the ASK event, and the change monitor of web_execute_js.
(() => {
  if (window.__ga || window !== window.top) return;

  const LABEL_CHARS = 80, LINK_TEXT_CHARS = 150, HREF_CHARS = 100, VALUE_CHARS = 200;
  const OPTIONS_SHOWN = 20, HTML_CHARS = 2000, ITEMS_MAX = 500, KEYS_MAX = 200, DEPTH_MAX = 5;
  const CHANGE_TEXT_CHARS = 1500, CHANGE_NODES = 50, FIELDS_MAX = 2000;
  const TITLE_CHARS = 100, PAGE_URL_CHARS = 300;  // in the [page] line
  const MIN_FONT_PX = 1, COLOUR_NEAR = 10;  // smaller text, or this close to its background: unseen
  const LONG_AGO = 1e9;  // ms, for a page that draws nothing after its load
  const SMALL_TEXT = 40;  // chars: a text change this short (a ticking clock) is no redraw
  const ASK = 'ga-node-ask', ANSWER = 'ga-node';  // ga(N) in the main world <-> the registry
  const CONTROLS = new Set(['input', 'select', 'textarea']);  // kept when styled opacity:0
  const SKIP = new Set(['script', 'style', 'noscript', 'template', 'head', 'meta', 'link',
    'title', 'base', 'svg', 'canvas', 'object', 'embed', 'audio', 'video', 'source', 'track',
    'map', 'datalist', 'option', 'optgroup', 'param']);
  const BLOCK = new Set(['p', 'div', 'section', 'article', 'header', 'footer', 'main', 'nav',
    'aside', 'ul', 'ol', 'dl', 'dt', 'dd', 'table', 'thead', 'tbody', 'tfoot', 'form',
    'fieldset', 'legend', 'blockquote', 'figure', 'figcaption', 'details', 'summary',
    'address', 'hr', 'body', 'caption', 'center', 'menu', 'hgroup', 'search']);
  const ITEMS = new Set(['li', 'tr', 'div', 'article', 'a', 'dt', 'option']);
  // prose, never collapsed as similar items: text outside links and controls that is long
  // or reads as a sentence (words ending in . ! ?, or CJK sentence punctuation)
  const PROSE_CHARS = 100, ACTIVE = 'a[href],button,select,textarea,label';
  const SENTENCE = /(?:\S+\s+){5,}\S*[.!?](?:\s|$)|[\u3002\uff01\uff1f]/;
  const ROLE_KIND = {button: 'button', link: 'link', checkbox: 'checkbox', radio: 'radio',
    switch: 'checkbox', tab: 'clickable', menuitem: 'clickable', option: 'clickable',
    menuitemcheckbox: 'checkbox', menuitemradio: 'radio', textbox: 'textarea',
    combobox: 'clickable', treeitem: 'clickable'};
  const STOP = {};

  const ga = {nodes: [null], lastMutation: 0, watching: null};
  Object.defineProperty(window, '__ga', {value: ga, enumerable: false, configurable: true});

  // ga(N) of a model script (main world) dispatches ASK with N; the answer is ANSWER
  // dispatched on the element (its detail 'ok'), or on the document ('missing' | 'gone').
  function answer(e) {
    const el = ga.nodes[e.detail];
    const status = !el ? 'missing' : el.isConnected ? 'ok' : 'gone';
    (status === 'ok' ? el : document).dispatchEvent(
      new CustomEvent(ANSWER, {detail: status, bubbles: true, composed: true}));
  }
  document.addEventListener(ASK, answer, true);

  // ---- text helpers ---------------------------------------------------------------------
  const squeeze = (s) => String(s || '').replace(/\s+/g, ' ').trim();

  // Cuts. The page never holds a secret, so it cannot cut around one: a call given `cuts`
  // ({mark, marks, margin}) keeps `margin` chars past each cut in `cuts.tails` and marks the
  // cut with the code point mark + i (a private-use range chosen at random per call, which
  // no page can forge; past `marks` cuts, the last one, without a tail); Python masks each
  // text with its tail, then cuts it (tools/web/cuts.py). Without `cuts`, a cut ends in '…'.
  let cuts = null;

  function cutAt(s, at) {  // s cut after `at` chars
    const code = s.charCodeAt(at - 1);
    if (code >= 0xD800 && code < 0xDC00) at--;  // never half a surrogate pair
    if (!cuts) return s.slice(0, at) + '…';
    const i = Math.min(cuts.tails.length, cuts.marks);
    if (i < cuts.marks) cuts.tails.push(s.slice(at, at + cuts.margin));
    return s.slice(0, at) + String.fromCodePoint(cuts.mark + i);
  }
  const cut = (s, n) => (s.length > n ? cutAt(s, n - 1) : s);

  function withCuts(opts, run) {  // run() with the cuts of opts.cuts; its tails set on the result
    cuts = opts && opts.cuts ? Object.assign({tails: []}, opts.cuts) : null;
    try {
      const out = run();
      if (cuts && cuts.tails.length) out.tails = cuts.tails;
      return out;
    } finally {
      cuts = null;
    }
  }
  const quote = (s) => '"' + s.replace(/"/g, '\\"') + '"';

  // visible-ish text of a subtree, without form controls (nor, given a scan's ctx, text
  // that cannot be seen)
  function textOf(node, ctx) {
    let out = '';
    const walker = document.createTreeWalker(node, NodeFilter.SHOW_ALL);
    for (let n = walker.nextNode(); n && out.length < 400; n = walker.nextNode()) {
      const parent = n.parentElement;
      if (n.nodeType === 3 && parent && !SKIP.has(parent.localName) &&
          !parent.closest('select,textarea') && !(ctx && unseen(parent, ctx))) out += ' ' + n.data;
      else if (n.nodeType === 1 && n.localName === 'img' && n.alt) out += ' ' + n.alt;
    }
    return squeeze(out);
  }

  function labelOf(el) {
    const aria = el.getAttribute('aria-label');
    if (aria && aria.trim()) return squeeze(aria);
    const by = el.getAttribute('aria-labelledby');
    if (by) {
      const t = by.split(/\s+/).map((id) => document.getElementById(id))
        .filter(Boolean).map(textOf).join(' ');
      if (t.trim()) return squeeze(t);
    }
    if (el.labels && el.labels.length) {
      const t = Array.from(el.labels).map(textOf).join(' ');
      if (t.trim()) return squeeze(t);
    }
    return squeeze(el.getAttribute('placeholder') || el.getAttribute('title') ||
                   el.getAttribute('alt') || el.getAttribute('name') || '');
  }

  // ---- visibility -----------------------------------------------------------------------
  function style(el) { return el.ownerDocument.defaultView.getComputedStyle(el); }

  // opacity:0 of its own, not on its way in (content revealed on scroll fades in with a
  // transition or an animation); a control may be see-through under a styled label
  function transparent(el) {
    const s = style(el);
    const fading = /opacity|all/.test(s.transitionProperty) && parseFloat(s.transitionDuration) > 0;
    return s.opacity === '0' && !fading && s.animationName === 'none';
  }

  // text that cannot be seen: a font too small, or its colour on a like background
  function unseen(el, ctx) {
    if (!el) return false;
    let hidden = ctx.unseen.get(el);
    if (hidden !== undefined) return hidden;
    const s = style(el);
    const ink = rgba(s.color);  // null: a colour space we do not compare
    hidden = parseFloat(s.fontSize) < MIN_FONT_PX || (ink !== null && (ink[3] === 0 ||
      (ink[3] === 1 && near(ink, background(el, ctx)))));
    ctx.unseen.set(el, hidden);
    return hidden;
  }

  // the opaque colour painted behind el's text, or null when it cannot be told (an image,
  // a see-through colour, or an out-of-flow box that may sit over anything)
  function background(el, ctx) {
    if (ctx.ground.has(el)) return ctx.ground.get(el);
    const s = style(el);
    const own = rgba(s.backgroundColor);
    let ground;
    if (s.backgroundImage !== 'none' || (own && own[3] > 0 && own[3] < 1)) ground = null;
    else if (own && own[3] === 1) ground = own;
    else if (s.position === 'absolute' || s.position === 'fixed') ground = null;
    else {
      const up = el.parentElement || (el.parentNode && el.parentNode.host);
      ground = up ? background(up, ctx) : [255, 255, 255, 1];  // the canvas: white
    }
    ctx.ground.set(el, ground);
    return ground;
  }

  function rgba(colour) {  // a computed colour: rgb(r, g, b) or rgba(r, g, b, a)
    const m = /^rgba?\(([\d.]+), ([\d.]+), ([\d.]+)(?:, ([\d.]+))?\)$/.exec(colour);
    return m ? [+m[1], +m[2], +m[3], m[4] === undefined ? 1 : +m[4]] : null;
  }

  function near(a, b) {
    return b !== null && Math.abs(a[0] - b[0]) <= COLOUR_NEAR &&
      Math.abs(a[1] - b[1]) <= COLOUR_NEAR && Math.abs(a[2] - b[2]) <= COLOUR_NEAR;
  }

  // 0 visible, 1 hidden (drop the subtree), 2 no box of its own (walk the children)
  function visibility(el, ctx) {
    if (el.getAttribute('aria-hidden') === 'true') return 1;
    if (!el.checkVisibility({visibilityProperty: true})) {
      return style(el).display === 'contents' ? 2 : 1;
    }
    if (!CONTROLS.has(el.localName) && !el.checkVisibility({opacityProperty: true}) &&
        transparent(el)) return 1;
    const r = el.getBoundingClientRect();
    const win = el.ownerDocument.defaultView;
    const top = r.top + win.scrollY, bottom = r.bottom + win.scrollY;
    if (r.width <= 1 || r.height <= 1) {
      const s = style(el);
      if (s.overflow !== 'visible' || (s.position === 'absolute' && s.clip !== 'auto')) return 1;
      if (s.transform !== 'none' && r.width === 0 && r.height === 0) return 1;  // scaled away
    }
    if (style(el).contentVisibility === 'hidden') return 1;  // its content is never drawn
    if (r.right + win.scrollX <= 0 || bottom <= 0) return 1;
    if (ctx.band && win === window && (bottom < ctx.band[0] || top > ctx.band[1])) return 1;
    ctx.y = top;
    return 0;
  }

  // ---- output ---------------------------------------------------------------------------
  // Lines of text within a budget of chars. Past it, STOP is thrown; end() then keeps what
  // fits of the line being written, so a text longer than the budget (one huge paragraph,
  // a page that is one line of JSON, a run of inline links) is cut there, never dropped.
  class Writer {
    constructor(budget) {
      this.lines = []; this.cur = ''; this.prefix = ''; this.chars = 0; this.budget = budget;
      this.inline = 0;
    }
    add(s) { this.cur += s; if (this.chars + this.cur.length > this.budget) throw STOP; }
    text(s) { this.add(s.replace(/\s+/g, ' ')); }
    whole(s) {  // all of s or none of it (an element's marker)
      if (this.chars + this.cur.length + s.length > this.budget) throw STOP;
      this.cur += s;
    }
    block() {
      if (this.inline) { this.cur += ' '; return; }
      const line = this.cur.replace(/ {2,}/g, ' ').trim();
      this.cur = '';
      if (!line) return;
      const full = this.prefix + line;
      this.chars += full.length + 1;
      this.lines.push(full);
      if (this.chars > this.budget) throw STOP;
    }
    line(s) { this.block(); this.add(s); this.block(); }
    start(prefix) { this.block(); this.prefix = prefix; }
    end() {  // the line being written, cut at the budget
      const room = this.budget - this.chars - this.prefix.length;
      const line = this.cur.replace(/\s+/g, ' ').trim();
      this.cur = '';
      const shown = line.length <= room ? line : room > 1 ? cutAt(line, room - 1) : '';
      if (shown) this.lines.push(this.prefix + shown);
    }
  }

  // ---- interactive elements -------------------------------------------------------------
  function kindOf(el, ctx) {
    const t = el.localName;
    if (t === 'a' && el.hasAttribute('href')) return 'link';
    if (t === 'button' || t === 'summary') return 'button';
    if (t === 'input') {
      const type = (el.getAttribute('type') || 'text').toLowerCase();
      if (type === 'hidden') return null;
      if (['button', 'submit', 'reset', 'image'].includes(type)) return 'button';
      return type === 'checkbox' || type === 'radio' ? type : 'input';
    }
    if (t === 'select' || t === 'textarea') return t;
    const role = el.getAttribute('role');
    if (role && ROLE_KIND[role]) return ROLE_KIND[role];
    if (el.isContentEditable && !(el.parentElement && el.parentElement.isContentEditable)) {
      return 'textarea';
    }
    if (ctx.inControl) return null;
    if (el.hasAttribute('onclick') || typeof el.onclick === 'function') return 'clickable';
    if (ctx.pointerOk && style(el).cursor === 'pointer') {
      const parent = el.parentElement;
      if (!parent || style(parent).cursor !== 'pointer') return 'clickable';
    }
    return null;
  }

  // writes an element's marker (made by marker('[N]')) whole and registers the element as
  // [N], or neither when it does not fit the budget
  function register(el, w, marker) {
    w.whole((' ' + marker('[' + ga.nodes.length + ']') + ' ').replace(/\s+/g, ' '));
    ga.nodes.push(el);
  }

  function disabled(el) {
    return (el.matches(':disabled') || el.getAttribute('aria-disabled') === 'true')
      ? ' (disabled)' : '';
  }

  function checkMark(el) {
    return el.indeterminate ? '[-]'
      : (el.checked ?? el.getAttribute('aria-checked') === 'true') ? '[x]' : '[ ]';
  }

  function chosen(el) {
    return Array.from(el.options || []).filter((o) => o.selected)
      .map((o) => squeeze(o.text)).join(', ');
  }

  function fieldValue(el, kind) {  // passwords masked
    const value = kind === 'textarea' && el.isContentEditable && el.localName !== 'textarea'
      ? squeeze(el.innerText) : el.value || '';
    const type = (el.getAttribute('type') || 'text').toLowerCase();
    return type === 'password' && value ? '••••' : cut(squeeze(value), VALUE_CHARS);
  }

  function fieldText(el, kind) {
    const label = cut(labelOf(el), LABEL_CHARS);
    const named = label ? ' ' + quote(label) : '';
    if (kind === 'checkbox' || kind === 'radio') return kind + ' ' + checkMark(el) + named;
    if (kind === 'select') {
      const opts = Array.from(el.options || []);
      const shown = opts.slice(0, OPTIONS_SHOWN)
        .map((o) => cut(squeeze(o.text), LABEL_CHARS) + (o.selected ? '*' : ''));
      if (opts.length > OPTIONS_SHOWN) shown.push('… ' + (opts.length - OPTIONS_SHOWN) + ' more');
      return 'select' + named + ' = ' + quote(chosen(el)) + ' {' + shown.join(' | ') + '}';
    }
    const type = (el.getAttribute('type') || 'text').toLowerCase();
    const value = fieldValue(el, kind);
    let out = (kind === 'input' ? 'input type=' + type : 'textarea') + named;
    if (value) out += ' value=' + quote(value);
    const ph = el.getAttribute('placeholder');
    if (!value && ph && squeeze(ph) !== label) out += ' placeholder=' + quote(cut(squeeze(ph), LABEL_CHARS));
    if (el.readOnly) out += ' (readonly)';
    return out;
  }

  // text_only: a field as plain text with its state ("Email: ann@example.com", "[x] Remember
  // me", "Colour: Green"); returns true when the element's children still need a walk
  function plain(el, kind, w) {
    if (kind === 'link' || kind === 'clickable') return true;
    if (kind === 'button') {
      if (el.localName !== 'input') return true;
      w.text(' ' + squeeze(el.value) + ' ');
      return false;
    }
    const label = cut(labelOf(el), LABEL_CHARS);
    let text;
    if (kind === 'checkbox' || kind === 'radio') text = checkMark(el) + (label ? ' ' + label : '');
    else {
      const value = kind === 'select' ? chosen(el) : fieldValue(el, kind);
      text = (label ? label + ': ' : '') + (value || '(empty)');
    }
    w.text(' ' + text + disabled(el) + ' ');
    return false;
  }

  // Writes the marker; returns true when the element's children still need a walk.
  function interactive(el, kind, w, ctx) {
    if (ctx.textOnly) return plain(el, kind, w);
    if (kind === 'link' || kind === 'button' || kind === 'clickable') {
      let text = textOf(el, ctx);
      if (!text && el.localName === 'input') text = squeeze(el.value);
      if (!text) text = squeeze(el.getAttribute('aria-label') || el.getAttribute('title') || '');
      const long = text.length > LINK_TEXT_CHARS;
      let marker = kind + (long || !text ? '' : ' ' + quote(text));
      if (kind === 'link') marker += ' -> ' + cut(el.getAttribute('href'), HREF_CHARS);
      register(el, w, (id) => id + marker + disabled(el));
      return long;
    }
    register(el, w, (id) => id + fieldText(el, kind) + disabled(el));
    return false;
  }

  // ---- the walk -------------------------------------------------------------------------
  function childrenOf(el) {
    if (el.shadowRoot) return el.shadowRoot.childNodes;
    if (el.localName === 'slot') {
      const assigned = el.assignedNodes({flatten: true});
      return assigned.length ? assigned : el.childNodes;
    }
    return el.childNodes;
  }

  function signature(el) { return el.localName + '.' + (el.getAttribute('class') || ''); }

  function prose(el) {
    let out = '';
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    for (let n = walker.nextNode(); n && out.length < PROSE_CHARS; n = walker.nextNode()) {
      const parent = n.parentElement;
      if (parent && !SKIP.has(parent.localName) && !parent.closest(ACTIVE)) out += ' ' + n.data;
    }
    out = squeeze(out);
    return out.length >= PROSE_CHARS || SENTENCE.test(out);
  }

  // whether a run kids[i..j) may be cut: its first items (those that would be shown and
  // the next) hold no prose
  function listLike(kids, i, j, ctx) {
    for (let m = i, looked = 0; m < j && looked <= ctx.similarShow; m++) {
      if (kids[m].nodeType !== 1) continue;
      if (prose(kids[m])) return false;
      looked++;
    }
    return true;
  }

  function walkChildren(el, w, ctx) {
    const kids = childrenOf(el);
    let i = 0;
    while (i < kids.length) {
      const k = kids[i];
      if (k.nodeType !== 1 || !ITEMS.has(k.localName)) {
        walk(k, w, ctx);
        i++;
        continue;
      }
      const sig = signature(k);
      let j = i + 1, count = 1;
      for (; j < kids.length; j++) {
        const n = kids[j];
        if (n.nodeType === 3 && !n.data.trim()) continue;
        if (n.nodeType !== 1 || signature(n) !== sig) break;
        count++;
      }
      if (count > ctx.similarMin && listLike(kids, i, j, ctx)) {
        let shown = 0, m = i;
        for (; m < j && shown < ctx.similarShow; m++) {
          if (kids[m].nodeType === 1) shown++;
          walk(kids[m], w, ctx);
        }
        w.line('[… ' + (count - shown) + ' more similar items]');
      } else {
        for (let m = i; m < j; m++) walk(kids[m], w, ctx);
      }
      i = j;
    }
  }

  function walk(node, w, ctx) {
    if (node.nodeType === 3) {
      if (!node.data.trim() || !unseen(node.parentElement, ctx)) w.text(node.data);
      return;
    }
    if (node.nodeType !== 1) return;
    const el = node, t = el.localName;
    if (SKIP.has(t)) return;
    const vis = visibility(el, ctx);
    if (vis === 1) return;
    if (vis === 2) { walkChildren(el, w, ctx); return; }
    if (t === 'br') { w.block(); return; }
    if (t === 'iframe' || t === 'frame') { frame(el, w, ctx); return; }
    if (t === 'pre') {
      if (!unseen(el, ctx)) pre(el, w);
      return;
    }
    if (t === 'img') {
      if (el.alt && !ctx.textOnly && !ctx.inControl) w.text(' [img ' + quote(cut(squeeze(el.alt), LABEL_CHARS)) + '] ');
      return;
    }
    if (t === 'label' && el.control && !el.querySelector('a[href],button') &&
        visibility(el.control, ctx) === 0) {
      if (el.contains(el.control)) walk(el.control, w, ctx);
      return;
    }
    const kind = kindOf(el, ctx);
    if (kind && !interactive(el, kind, w, ctx)) return;
    const inner = kind ? Object.assign({}, ctx, {inControl: true}) : ctx;
    container(el, t, w, inner);
  }

  function container(el, t, w, ctx) {
    const role = el.getAttribute('role');
    if (/^h[1-6]$/.test(t)) return section(el, w, ctx, '#'.repeat(+t[1]) + ' ');
    if (t === 'li') return section(el, w, ctx, '  '.repeat(ctx.depth) + '- ', 1);
    if (t === 'tr') return row(el, w, ctx);
    if ((t === 'dialog' && el.open) || role === 'dialog' || role === 'alertdialog') {
      w.line('[dialog]');
      walkChildren(el, w, ctx);
      w.line('[/dialog]');
      return;
    }
    if (t === 'details' && !el.open) {  // closed: only its summary shows
      const summary = Array.from(el.children).find((c) => c.localName === 'summary');
      if (summary) walk(summary, w, ctx);
      return;
    }
    const block = BLOCK.has(t) || t.includes('-');
    if (block) w.block();
    walkChildren(el, w, ctx);
    if (block) w.block();
  }

  function section(el, w, ctx, prefix, deeper = 0) {
    const saved = w.prefix;
    w.start(prefix);
    walkChildren(el, w, deeper ? Object.assign({}, ctx, {depth: ctx.depth + deeper}) : ctx);
    w.block();
    w.prefix = saved;
  }

  function row(el, w, ctx) {
    w.block();
    w.inline++;
    try {
      let first = true;
      for (const cell of el.children) {
        if (visibility(cell, ctx) === 1) continue;
        if (!first) w.add(' | ');
        first = false;
        walkChildren(cell, w, ctx);
      }
    } finally {
      w.inline--;
    }
    w.block();
  }

  function pre(el, w) {
    w.block();
    for (const line of el.textContent.split('\n')) {
      w.add(line.replace(/\s+$/, ''));
      const keep = w.prefix;
      w.lines.push(keep + w.cur);
      w.chars += keep.length + w.cur.length + 1;
      w.cur = '';
      if (w.chars > w.budget) throw STOP;
    }
  }

  function frame(el, w, ctx) {
    let doc = null;
    try { doc = el.contentDocument; } catch (e) { doc = null; }
    if (doc && doc.body) { w.block(); walkChildren(doc.body, w, ctx); w.block(); return; }
    if (!ctx.textOnly) w.line('[iframe ' + cut(el.getAttribute('src') || '', HREF_CHARS) + ']');
  }

  ga.scan = function (opts) {
    return withCuts(opts, () => scan(opts));
  };

  function scan(opts) {
    const o = Object.assign({budget: 35000, textOnly: false, viewport: false, similarMin: 50,
      similarShow: 10, pointer: true}, opts || {});
    ga.nodes = [null];
    const ctx = {textOnly: o.textOnly, similarMin: o.similarMin, similarShow: o.similarShow,
      depth: 0, inControl: false, pointerOk: o.pointer, y: 0, unseen: new Map(), ground: new Map(),
      band: o.viewport ? [scrollY - innerHeight / 4, scrollY + innerHeight * 1.25] : null};
    const w = new Writer(o.budget);
    const height = document.documentElement.scrollHeight;
    let truncated = null;
    try {
      walkChildren(document.body || document.documentElement, w, ctx);
      w.inline = 0;
      w.block();
    } catch (e) {
      if (e !== STOP) throw e;
      w.end();
      truncated = Math.round(ctx.y);
      w.lines.push('[TRUNCATED at y=' + truncated + ' of ' + height + ' px]');
    }
    const n = ga.nodes.length - 1;
    const title = cut(squeeze(document.title), TITLE_CHARS);
    const url = cut(location.href, PAGE_URL_CHARS);
    const head = '[page] ' + title + ' | ' + url + ' | scroll ' + Math.round(scrollY) + '/' +
      height + ' px' + (o.textOnly ? '' : ' | ' + n + ' interactive');
    return {title, url, text: head + '\n' + w.lines.join('\n'), interactive: n, truncated};
  }

  // ---- change monitor -------------------------------------------------------------------
  function fields() {
    return Array.from(document.querySelectorAll('input,select,textarea')).slice(0, FIELDS_MAX)
      .map((f) => [f, f.value, f.checked]);
  }

  // A change the page is still drawing: elements come or go, or a longer text. A clock or a
  // counter that ticks (short text) or an attribute that animates never lets a page settle.
  function redraws(r) {
    if (r.type === 'attributes') return false;
    const long = (node) => (node.data || '').length >= SMALL_TEXT;
    if (r.type === 'characterData') return long(r.target);
    for (const n of r.addedNodes) if (n.nodeType === 1 || long(n)) return true;
    for (const n of r.removedNodes) if (n.nodeType === 1 || long(n)) return true;
    return false;
  }

  function observe(records) {
    if (records.some(redraws)) ga.lastMutation = performance.now();
    const c = ga.watching;
    if (!c) return;
    for (const r of records) {
      if (r.type === 'attributes') { c.attributes++; continue; }
      if (r.type === 'characterData') { c.text.push(r.target.data); continue; }
      c.removed += r.removedNodes.length;
      for (const n of r.addedNodes) {
        c.added++;
        if (c.text.length >= CHANGE_NODES) continue;
        const t = n.nodeType === 1 ? (SKIP.has(n.localName) ? '' : n.innerText) : n.data;
        if (t && t.trim()) c.text.push(t);
      }
    }
  }
  const observer = new MutationObserver(observe);
  observer.observe(document,
    {subtree: true, childList: true, attributes: true, characterData: true});

  ga.stop = function () {  // the agent leaves this page (attach mode): nothing keeps running
    observer.disconnect();
    document.removeEventListener(ASK, answer, true);
    ga.nodes = [null];
    delete window.__ga;
  };

  ga.watch = function () {
    ga.watching = {added: 0, removed: 0, attributes: 0, text: [], fields: fields()};
    return true;
  };

  // [ms since the page last redrew (see redraws), ms since it finished loading (0 until
  // then); a page without scripts draws nothing later: loaded long ago]
  ga.idle = function () {
    const now = performance.now();
    const nav = performance.getEntriesByType('navigation')[0];
    const loaded = !nav || !document.scripts.length ? LONG_AGO
      : nav.loadEventEnd ? now - nav.loadEventEnd : 0;
    return [now - ga.lastMutation, loaded];
  };

  ga.changes = function (opts) {  // what changed since watch(); ends the watch
    return withCuts(opts, changes);
  };

  function changes() {
    const c = ga.watching;
    ga.watching = null;
    if (!c) return {};
    const out = {};
    for (const k of ['added', 'removed', 'attributes']) if (c[k]) out[k] = c[k];
    const changed = c.fields.filter(([f, v, on]) => f.value !== v || f.checked !== on).length;
    if (changed) out.fields = changed;
    const text = cut(squeeze(Array.from(new Set(c.text.map(squeeze))).join(' · ')), CHANGE_TEXT_CHARS);
    if (text) out.text = text;
    return out;
  }
})();
