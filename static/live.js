// Live updates and instant filters for the run pages. The pages are complete without it.
//
// A page element with data-live-src names a Server-Sent Events stream. Each "update" event
// carries HTML elements with ids; each replaces the page's element of the same id. "end" means
// the stream is over for good (the run finished): the page stops listening.
"use strict";
(() => {
  // Filters of the homepage's active runs: checkboxes grouped by name (type, tc, threads);
  // a row shows when its data-type, data-tc and data-threads values are all ticked.
  const filterAttrs = { type: "type", tc: "tc", threads: "threads" };

  function applyFilters(form) {
    const on = {};
    for (const name of Object.keys(filterAttrs)) on[name] = new Set();
    form.querySelectorAll("input[type=checkbox]").forEach((box) => {
      if (box.checked && on[box.name]) on[box.name].add(box.value);
    });
    const rows = document.querySelectorAll("#active-tbody tr[data-run]");
    let shown = 0;
    rows.forEach((row) => {
      const visible = Object.entries(filterAttrs).every(([name, attr]) => on[name].has(row.dataset[attr]));
      row.hidden = !visible;
      if (visible) shown++;
    });
    const count = document.getElementById("active-shown");
    if (count) count.textContent = shown === rows.length ? "" : "(" + shown + " shown)";
  }

  // keepFiltersInURL makes a reload or a shared link show the same filters.
  function keepFiltersInURL(form) {
    const boxes = Array.from(form.querySelectorAll("input[type=checkbox]"));
    const params = new URLSearchParams(window.location.search);
    for (const name of Object.keys(filterAttrs)) params.delete(name);
    params.delete("filter");
    if (!boxes.every((b) => b.checked)) {
      params.set("filter", "1");
      boxes.filter((b) => b.checked).forEach((b) => params.append(b.name, b.value));
    }
    const query = params.toString();
    window.history.replaceState(null, "", window.location.pathname + (query ? "?" + query : "") + window.location.hash);
  }

  function listen(src, form) {
    const status = document.querySelector(".live-status");
    const dot = document.getElementById("live-dot");
    if (status) status.hidden = false;
    const last = new Map(); // id -> the HTML last put in place
    const source = new EventSource(src);
    source.addEventListener("open", () => dot && dot.classList.add("on"));
    source.addEventListener("error", () => {
      if (dot) dot.classList.remove("on");
      // The browser retries a dropped stream by itself, but gives up on a refusal (the server
      // answers 503 when too many streams are open): try again later, spread out.
      if (source.readyState === EventSource.CLOSED) {
        setTimeout(() => listen(src, form), 30000 + Math.random() * 30000);
      }
    });
    source.addEventListener("update", (ev) => {
      const tpl = document.createElement("template");
      tpl.innerHTML = ev.data;
      for (const el of Array.from(tpl.content.children)) {
        if (!el.id) continue;
        const old = document.getElementById(el.id);
        if (!old) continue;
        const html = el.outerHTML;
        if ((last.has(el.id) ? last.get(el.id) : old.outerHTML) === html) continue;
        last.set(el.id, html);
        old.replaceWith(el); // its data-confirm buttons ask through shoal.js's document listener
        el.classList.add("updated");
        el.addEventListener("animationend", () => el.classList.remove("updated"), { once: true });
      }
      if (form) applyFilters(form);
    });
    source.addEventListener("end", () => {
      source.close();
      if (dot) dot.classList.remove("on");
    });
  }

  document.addEventListener("DOMContentLoaded", () => {
    const form = document.getElementById("run-filters");
    if (form) {
      const apply = document.getElementById("run-filters-apply");
      if (apply) apply.hidden = true; // filtering is instant
      form.addEventListener("change", () => {
        applyFilters(form);
        keepFiltersInURL(form);
      });
      applyFilters(form);
    }
    const live = document.querySelector("[data-live-src]");
    if (live && window.EventSource) listen(live.dataset.liveSrc, form);
  });
})();
