// Shoal's shared page script. Pages work without it; it only adds conveniences.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  // Buttons with data-confirm ask before their form is sent.
  document.querySelectorAll("[data-confirm]").forEach((el) => {
    el.addEventListener("click", (ev) => {
      if (!window.confirm(el.dataset.confirm)) ev.preventDefault();
    });
  });
});
