// Shoal's shared page script. Pages work without it; it only adds conveniences.
"use strict";
// Buttons with data-confirm ask before their form is sent. One listener on the document serves
// them all, also those a live update (live.js) put in after the page loaded.
document.addEventListener("click", (ev) => {
  const el = ev.target instanceof Element ? ev.target.closest("[data-confirm]") : null;
  if (el && !window.confirm(el.dataset.confirm)) ev.preventDefault();
});
