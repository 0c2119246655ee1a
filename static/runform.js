// The new-test form: test-type presets and bounds fill the form at once, and only the fields
// of the chosen stop rule and options are shown. Without this script the form still works:
// preset links prefill it on the server and every field stays visible.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const form = document.getElementById("form-run");
  if (!form) return;
  const field = (id) => document.getElementById(id);
  const show = (el, on) => { if (el) el.hidden = !on; };

  // Which stop rule is chosen decides which blocks are shown.
  const stopRule = () => {
    const r = form.querySelector("input[name=stop_rule]:checked");
    return r ? r.value : "";
  };
  const updateStopRule = () => {
    const rule = stopRule();
    form.querySelectorAll(".stop-block").forEach((b) => {
      show(b, b.dataset.stop.split(" ").includes(rule));
    });
  };

  // Preset bounds fill Elo0 and Elo1; only custom bounds let them be typed.
  const bounds = field("bounds");
  const updateBounds = () => {
    const opt = bounds.selectedOptions[0];
    const custom = !opt || opt.value === "custom";
    if (!custom) {
      field("sprt_elo0").value = opt.dataset.elo0;
      field("sprt_elo1").value = opt.dataset.elo1;
    }
    form.querySelectorAll(".custom-bounds").forEach((el) => show(el, custom));
  };

  // Options that only matter when their box is ticked.
  const toggles = [
    ["odds", ".odds-field"],
    ["checkbox-arch-filter", ".arch-field"],
    ["checkbox-compiler", ".compiler-field"],
  ];
  const updateToggles = () => {
    toggles.forEach(([box, sel]) => {
      const on = field(box).checked;
      // A field with an error stays visible, so the message can be read.
      form.querySelectorAll(sel).forEach((el) => show(el, on || el.classList.contains("invalid")));
    });
    // Without time odds the test engine plays the base's time control.
    if (!field("odds").checked) field("new_tc").value = field("tc").value;
  };

  const setHash = (id, hash) => {
    const el = field(id);
    const rest = el.value.split(/\s+/).filter((t) => t !== "" && !/^Hash=\d+$/.test(t));
    el.value = ["Hash=" + hash, ...rest].join(" ");
  };

  const rerun = form.querySelector("input[name=rescheduled_from]") !== null;
  const applyPreset = (link) => {
    const p = link.dataset;
    field("tc").value = p.tc;
    field("new_tc").value = p.tc;
    field("threads").value = p.threads;
    field("throughput").value = p.throughput;
    setHash("new-options", p.hash);
    setHash("base-options", p.hash);
    const rule = form.querySelector(`input[name=stop_rule][value="${p.stopRule}"]`);
    if (rule) rule.checked = true;
    if (p.bounds) {
      bounds.value = p.bounds;
      updateBounds();
    }
    if (p.games) field("num-games").value = p.games;
    if (p.testBranch && !rerun) {
      field("test-branch").value = p.testBranch;
      field("base-branch").value = p.baseBranch;
      field("resolved_base").value = p.resolvedBase;
      field("base-signature").value = p.baseSignature;
      if (field("run-info").value.trim() === "") field("run-info").value = p.info;
    }
    document.querySelectorAll(".presets a.preset").forEach((a) => {
      a.classList.toggle("current", a === link);
      if (a === link) a.setAttribute("aria-current", "true");
      else a.removeAttribute("aria-current");
    });
    updateStopRule();
    updateToggles();
  };

  document.querySelectorAll(".presets a.preset").forEach((link) => {
    link.addEventListener("click", (ev) => {
      ev.preventDefault();
      applyPreset(link);
    });
  });
  form.querySelectorAll("input[name=stop_rule]").forEach((r) => r.addEventListener("change", updateStopRule));
  bounds.addEventListener("change", updateBounds);
  toggles.forEach(([box]) => field(box).addEventListener("change", updateToggles));
  field("tc").addEventListener("input", () => {
    if (!field("odds").checked) field("new_tc").value = field("tc").value;
  });

  // A second click on submit would create a second run.
  form.addEventListener("submit", () => {
    const btn = field("submit-test");
    btn.disabled = true;
    btn.textContent = "Submitting…";
  });
  // Coming back to the page (the back button) must give a usable button again.
  window.addEventListener("pageshow", () => {
    const btn = field("submit-test");
    btn.disabled = false;
    btn.textContent = "Submit test";
  });

  updateStopRule();
  updateBounds();
  updateToggles();
});
