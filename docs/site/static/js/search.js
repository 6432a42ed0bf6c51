// The docs' search: index.json holds every page's title and plain text; a
// query matches pages containing every one of its words, titles first.
(function () {
  "use strict";
  var script = document.currentScript;
  var input = document.getElementById("search-input");
  var status = document.getElementById("search-status");
  var list = document.getElementById("search-results");
  var pages = null;

  function escapeHTML(s) {
    return s.replace(/[&<>"']/g, function (c) {
      return { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c];
    });
  }

  // excerpt: the text around the first word found, the words marked.
  function excerpt(text, words) {
    var lower = text.toLowerCase();
    var at = lower.indexOf(words[0]);
    var start = Math.max(0, at - 60);
    var s = (start > 0 ? "…" : "") + text.slice(start, start + 200) + (start + 200 < text.length ? "…" : "");
    s = escapeHTML(s);
    words.forEach(function (w) {
      var re = new RegExp("(" + escapeHTML(w).replace(/[.*+?^${}()|[\]\\]/g, "\\$&") + ")", "gi");
      s = s.replace(re, "<mark>$1</mark>");
    });
    return s;
  }

  function search(q) {
    var words = q.toLowerCase().split(/\s+/).filter(Boolean);
    list.innerHTML = "";
    if (!words.length) {
      status.textContent = pages.length + " pages indexed. Type to search.";
      return;
    }
    var hits = [];
    pages.forEach(function (p) {
      var title = p.title.toLowerCase(), text = p.text.toLowerCase(), score = 0;
      for (var i = 0; i < words.length; i++) {
        var w = words[i], inTitle = title.indexOf(w) >= 0, n = text.split(w).length - 1;
        if (!inTitle && n === 0) return;
        score += (inTitle ? 100 : 0) + Math.min(n, 20);
      }
      hits.push({ page: p, score: score });
    });
    hits.sort(function (a, b) { return b.score - a.score; });
    status.textContent = hits.length === 0 ? "No page matches “" + q + "”." :
      hits.length + (hits.length === 1 ? " page matches" : " pages match") + " “" + q + "”.";
    hits.forEach(function (h) {
      var li = document.createElement("li");
      li.innerHTML = '<a href="' + h.page.url + '">' + escapeHTML(h.page.title) + "</a>" +
        '<span class="section">' + escapeHTML(h.page.section) + "</span>" +
        "<p>" + excerpt(h.page.text, q.toLowerCase().split(/\s+/).filter(Boolean)) + "</p>";
      list.appendChild(li);
    });
  }

  var q = new URLSearchParams(window.location.search).get("q") || "";
  input.value = q;
  fetch(script.dataset.index)
    .then(function (r) {
      if (!r.ok) throw new Error("index.json: " + r.status);
      return r.json();
    })
    .then(function (data) {
      pages = data;
      search(input.value);
      input.addEventListener("input", function () {
        var u = new URL(window.location.href);
        u.searchParams.set("q", input.value);
        window.history.replaceState(null, "", u);
        search(input.value);
      });
    })
    .catch(function (err) {
      status.textContent = "The search index could not be loaded: " + err.message;
      console.error(err);
    });
})();
