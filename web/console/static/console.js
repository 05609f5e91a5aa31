// Ledgerflow console: progressive enhancement only; every page works without it.
(function () {
  "use strict";
  // Live regions (data-live, htmx polling) pause while the operator fills a form on the page: a form
  // with focus inside it or with something typed, ticked or chosen since the page loaded.
  var dirty = new WeakSet();
  function filling() {
    var active = document.activeElement;
    if (active && active.form && active.tagName !== "BUTTON") { return true; }
    var forms = document.forms;
    for (var i = 0; i < forms.length; i++) { if (dirty.has(forms[i])) { return true; } }
    return false;
  }
  document.addEventListener("input", function (e) { if (e.target.form) { dirty.add(e.target.form); } });
  document.addEventListener("change", function (e) { if (e.target.form) { dirty.add(e.target.form); } });
  document.addEventListener("submit", function (e) { dirty.delete(e.target); });
  document.addEventListener("htmx:beforeRequest", function (e) {
    var elt = e.detail && e.detail.elt;
    if (elt && elt.hasAttribute && elt.hasAttribute("data-live") && filling()) { e.preventDefault(); }
  });
  // JSON blocks: a copy button beside each (rendered hidden: without this script there is none).
  function copyText(text, done) {
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { done(true); }, function () { done(false); });
      return;
    }
    var area = document.createElement("textarea");  // plain HTTP: the older way
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    var ok = false;
    try { ok = document.execCommand("copy"); } catch (err) { ok = false; }
    document.body.removeChild(area);
    done(ok);
  }
  function showCopyButtons(root) {
    (root || document).querySelectorAll("button[data-copy]").forEach(function (b) { b.hidden = false; });
  }
  document.addEventListener("click", function (e) {
    var button = e.target.closest && e.target.closest("button[data-copy]");
    if (!button) { return; }
    var pre = button.parentNode.querySelector("pre");
    if (!pre) { return; }
    copyText(pre.textContent, function (ok) {
      button.textContent = ok ? "Copied" : "Copy failed";
      setTimeout(function () { button.textContent = "Copy"; }, 1500);
    });
  });
  // A live region keeps the folds (JSON blocks, panels) the operator opened or closed across its refresh.
  var folds = null;
  document.addEventListener("htmx:beforeSwap", function (e) {
    var elt = e.detail && e.detail.elt;
    if (elt && elt.id && elt.hasAttribute && elt.hasAttribute("data-live")) {
      folds = { id: elt.id, open: Array.prototype.map.call(elt.querySelectorAll("details"), function (d) { return d.open; }) };
    }
  });
  document.addEventListener("htmx:afterSettle", function () {
    showCopyButtons(document);
    if (!folds) { return; }
    var region = document.getElementById(folds.id);
    var all = region ? region.querySelectorAll("details") : [];
    if (all.length === folds.open.length) {
      for (var i = 0; i < all.length; i++) { all[i].open = folds.open[i]; }
    }
    folds = null;
  });
  document.addEventListener("DOMContentLoaded", function () {
    showCopyButtons(document);
    var all = document.getElementById("select-all");
    if (all) {
      all.addEventListener("change", function () {
        document.querySelectorAll('input[name="job_ids"], input[name="ids"]').forEach(function (box) { box.checked = all.checked; });
      });
    }
    // The status panel is one line on a phone; on a wide screen it is open (CSS does it where the
    // browser styles ::details-content; this is the fallback).
    var wide = window.matchMedia("(min-width: 600px)");
    var styled = window.CSS && CSS.supports && CSS.supports("selector(::details-content)");
    if (!styled && wide.matches) {
      document.querySelectorAll("details.collapse-phone").forEach(function (d) { d.open = true; });
    }
  });
})();
