() => {
  // Enter in a number box of the Live controls counts as leaving it: a slider re-plans on release,
  // which Gradio fires when its box loses focus but not on Enter (max new tokens re-plans on blur too)
  // (every column of sliders marked sq-sliders, the Race tab's too, and the Replay slider's box
  // under the tree)
  const OURS = ".sq-sliders, #sq-replay";
  document.addEventListener("keydown", (event) => {
    const box = event.target;
    if (event.key === "Enter" && box instanceof HTMLInputElement && box.type === "number"
        && box.closest(OURS)) {
      box.blur();
    }
  });
  // A value typed outside a slider's range is brought inside it before Gradio reads it (capture
  // phase: before the box's own blur). Gradio sent the release with the raw value, which was
  // refused, then snapped the box to its bound without an event: the page showed the old plan
  // beside a budget that Generate then ran (a budget of 0 ran as n=1).
  // A box emptied and left gets back the value it had when entered (Gradio sent null, refused,
  // then snapped the box to its minimum without a plan). By then the slider already holds the
  // emptied value, so the value on entering is kept here.
  // A slider of whole steps (budget, depth, top-k, Replay) takes a typed fraction rounded: Replay
  // showed step 2 beside a box reading 2.5.
  // The number fields beside the sliders (max new tokens, seed) do the same within their own
  // min/max: a 0 there was kept with a toast, where a slider's 0 became its minimum.
  const sliderBox = (box) => {
    if (!(box instanceof HTMLInputElement && box.type === "number" && box.closest(OURS))) return null;
    const range = box.closest(".block")?.querySelector('input[type="range"]');
    return range ?? (box.min !== "" && box.max !== "" ? box : null);
  };
  document.addEventListener("focus", (event) => {
    if (sliderBox(event.target)) event.target.dataset.sqEntered = event.target.value;
  }, true);
  // An emptied box is kept from Gradio until it is left (it would send null, refused in a toast).
  // Replay answers each keystroke (its event is input, not release): a step beyond the run is
  // brought to the last one as typed, not refused in a toast beside a box still reading 999.
  document.addEventListener("input", (event) => {
    const box = event.target, slider = sliderBox(box);
    if (!slider) return;
    if (box.value.trim() === "") {
      event.stopPropagation();
      return;
    }
    if (!box.closest("#sq-replay")) return;
    const typed = Number(box.value), low = Number(slider.min), high = Number(slider.max);
    if (!Number.isNaN(typed) && (typed < low || typed > high)) box.value = String(Math.min(Math.max(typed, low), high));
  }, true);
  document.addEventListener("blur", (event) => {
    const box = event.target, slider = sliderBox(box);
    if (!slider) return;
    if (box.value.trim() === "") {
      if (!box.dataset.sqEntered) return;
      box.value = box.dataset.sqEntered;
      box.dispatchEvent(new Event("input", { bubbles: true }));
      return;
    }
    const low = Number(slider.min), high = Number(slider.max), step = Number(slider.step), typed = Number(box.value);
    if (Number.isNaN(typed)) return;
    let value = Math.min(Math.max(typed, low), high);
    if (Number.isInteger(step) && step >= 1) value = low + Math.round((value - low) / step) * step;
    if (value === typed) return;
    box.value = String(value);
    box.dispatchEvent(new Event("input", { bubbles: true }));
  }, true);
}
