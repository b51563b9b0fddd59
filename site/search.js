// The site's search: every section of every chapter (assets/search-index.js, written by site/build.py),
// searched here in the browser. A section matches when it holds every word typed (title or text);
// title hits rank first. No server, no network: works from a static host or a local folder. Each edition's
// pages load their own index (search-index.js, search-index-zh.js) and say "nothing found" in their language
// (the results box's data-none, "{q}" standing for the query).
(function () {
  const input = document.getElementById("agl-search");
  const box = document.getElementById("agl-results");
  if (!input || !box || !window.AGL_SEARCH) return;
  const sections = window.AGL_SEARCH.map((s) => ({ ...s, haystack: (s.title + " " + s.text).toLowerCase() }));
  const escape = (t) => t.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);

  function snippet(text, word) {
    const at = text.toLowerCase().indexOf(word);
    if (at < 0) return escape(text.slice(0, 120));
    const start = Math.max(0, at - 50);
    const part = text.slice(start, at + word.length + 70);
    const hit = at - start;
    return (start ? "…" : "") + escape(part.slice(0, hit)) + "<mark>" + escape(part.slice(hit, hit + word.length)) +
      "</mark>" + escape(part.slice(hit + word.length)) + "…";
  }

  function search(query) {
    const words = query.toLowerCase().split(/\s+/).filter(Boolean);
    if (!words.length) return [];
    return sections
      .filter((s) => words.every((w) => s.haystack.includes(w)))
      .map((s) => ({ s, score: words.filter((w) => s.title.toLowerCase().includes(w)).length }))
      .sort((a, b) => b.score - a.score)
      .slice(0, 12)
      .map(({ s }) => ({ ...s, words }));
  }

  function show() {
    const found = search(input.value);
    if (!input.value.trim()) { box.innerHTML = ""; box.hidden = true; return; }
    box.hidden = false;
    box.innerHTML = found.length
      ? found.map((s) => `<a class="agl-result" role="option" href="${s.page}#${escape(s.id)}">` +
          `<b>${escape(s.title)}</b> <small>${escape(s.chapter)}</small><br><span>${snippet(s.text, s.words[0])}</span></a>`).join("")
      : `<span class="agl-none">${escape(box.dataset.none || "").replace("{q}", escape(input.value.trim()))}</span>`;
  }

  input.addEventListener("input", show);
  input.addEventListener("keydown", (e) => {
    const first = box.querySelector("a");
    if (e.key === "Enter" && first) window.location.href = first.href;
    if (e.key === "Escape") { input.value = ""; show(); }
  });
  document.addEventListener("click", (e) => { if (!e.target.closest(".agl-search")) box.hidden = true; });
  input.addEventListener("focus", show);
})();
