/* doccount report: filters, sort, search and the image viewer. Plain JS, no library, no network. */
(function () {
  "use strict";
  var table = document.getElementById("rows");
  if (!table) { return; }
  var tbody = table.tBodies[0];
  var rows = Array.prototype.slice.call(tbody.querySelectorAll("tr.q"));
  var filters = Array.prototype.slice.call(document.querySelectorAll("[data-filter]"));
  var search = document.getElementById("search");
  var sortSel = document.getElementById("sort");
  var shown = document.getElementById("shown");
  var reset = document.getElementById("reset");
  var nav = document.querySelector("nav.controls");

  var haystack = rows.map(function (r) {
    var parts = r.querySelectorAll(".searchable");
    var text = "";
    for (var i = 0; i < parts.length; i++) { text += parts[i].textContent + "\n"; }
    return text.toLowerCase();
  });

  function apply() {
    var needle = search ? search.value.trim().toLowerCase() : "";
    var active = filters.filter(function (f) { return f.value !== ""; });
    var n = 0;
    rows.forEach(function (r, i) {
      var ok = true;
      for (var k = 0; k < active.length && ok; k++) {
        var f = active[k];
        var have = r.getAttribute("data-f-" + f.getAttribute("data-filter")) || "";
        ok = have.indexOf("|" + f.value + "|") !== -1;
      }
      if (ok && needle) { ok = haystack[i].indexOf(needle) !== -1; }
      r.hidden = !ok;
      if (ok) { n++; }
    });
    if (shown) { shown.textContent = n + " of " + rows.length + " questions shown"; }
    document.documentElement.setAttribute("data-shown", String(n));
    observe();
  }

  function sortKey(r, key) {
    var v = r.getAttribute("data-s-" + key);
    return v === null || v === "" ? null : parseFloat(v);
  }

  function sortRows() {
    if (!sortSel) { return; }
    var spec = sortSel.value.split(":");
    var key = spec[0], desc = spec[1] === "desc";
    var sorted = rows.slice().sort(function (a, b) {
      var x = sortKey(a, key), y = sortKey(b, key);
      if (x === null && y === null) { return sortKey(a, "order") - sortKey(b, "order"); }
      if (x === null) { return 1; }
      if (y === null) { return -1; }
      if (x !== y) { return desc ? y - x : x - y; }
      return sortKey(a, "order") - sortKey(b, "order");
    });
    var frag = document.createDocumentFragment();
    sorted.forEach(function (r) { frag.appendChild(r); });
    tbody.appendChild(frag);
    observe();
  }

  filters.forEach(function (f) { f.addEventListener("change", apply); });
  if (search) { search.addEventListener("input", apply); }
  if (sortSel) { sortSel.addEventListener("change", sortRows); }
  if (reset) {
    reset.addEventListener("click", function () {
      filters.forEach(function (f) { f.value = ""; });
      if (search) { search.value = ""; }
      if (sortSel) { sortSel.selectedIndex = 0; sortRows(); }
      apply();
    });
  }

  /* Images: data URLs live once in a JSON block (an image shared by several questions is stored once)
     and are attached when a thumbnail scrolls into view. */
  var images = {};
  var blob = document.getElementById("report-images");
  if (blob) {
    try { images = JSON.parse(blob.textContent); } catch (e) { images = {}; }
  }
  var thumbs = Array.prototype.slice.call(document.querySelectorAll("img.thumb[data-img]"));
  function attach(img) {
    if (!img.getAttribute("src") && images[img.getAttribute("data-img")]) {
      img.setAttribute("src", images[img.getAttribute("data-img")]);
    }
  }
  var io = null;
  if ("IntersectionObserver" in window) {
    io = new IntersectionObserver(function (entries) {
      entries.forEach(function (e) {
        if (e.isIntersecting) { attach(e.target); io.unobserve(e.target); }
      });
    }, { rootMargin: "600px 0px" });
    thumbs.forEach(function (img) { io.observe(img); });
  } else {
    thumbs.forEach(attach);
  }
  window.addEventListener("beforeprint", function () { thumbs.forEach(attach); });
  function observe() {
    if (!io) { return; }
    thumbs.forEach(function (img) { if (!img.getAttribute("src")) { io.unobserve(img); io.observe(img); } });
  }

  var box = document.getElementById("lightbox");
  var boxImg = box ? box.querySelector("img") : null;
  var boxCap = box ? box.querySelector(".cap") : null;
  function openBox(img) {
    var src = images[img.getAttribute("data-img")];
    if (!box || !src) { return; }
    boxImg.setAttribute("src", src);
    boxImg.setAttribute("alt", img.getAttribute("alt") || "");
    boxCap.textContent = img.getAttribute("data-caption") || "";
    box.hidden = false;
  }
  function closeBox() { if (box) { box.hidden = true; boxImg.removeAttribute("src"); } }
  document.addEventListener("click", function (ev) {
    var t = ev.target;
    if (t && t.classList && t.classList.contains("thumb")) { openBox(t); }
    else if (box && !box.hidden && box.contains(t)) { closeBox(); }
  });
  document.addEventListener("keydown", function (ev) { if (ev.key === "Escape") { closeBox(); } });

  function fitHeader() {
    if (nav) { document.documentElement.style.setProperty("--controls-h", nav.offsetHeight + "px"); }
  }
  window.addEventListener("resize", fitHeader);
  fitHeader();
  if (sortSel) { sortRows(); }
  apply();
  document.documentElement.setAttribute("data-report-ready", "1");
})();
