// ga(N) of a model script, put in front of the script in the page's main world: element
// [N] of the last scan. The registry lives in the isolated world of extract.js; ga(N) asks
// it with an ASK event and it answers with an event dispatched on the element itself
// (caught here in the top document or a same-origin frame's, shadow roots included).
const ga = (n) => {
  let el = null, status = 'missing';
  const take = (e) => { status = e.detail; el = e.composedPath()[0]; };
  const docs = [document];
  for (let i = 0; i < docs.length; i++) {
    for (const f of docs[i].querySelectorAll('iframe,frame')) {
      try { if (f.contentDocument) docs.push(f.contentDocument); } catch (e) { /* other origin */ }
    }
  }
  for (const d of docs) d.addEventListener('ga-node', take, true);
  try {
    document.dispatchEvent(new CustomEvent('ga-node-ask', {detail: n}));
  } finally {
    for (const d of docs) d.removeEventListener('ga-node', take, true);
  }
  if (status === 'ok') return el;
  throw new Error(status === 'gone' ? `ga(${n}): element [${n}] left the page; scan again`
    : `ga(${n}): no element [${n}] in the last scan; scan again`);
};
