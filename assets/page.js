() => {
  // Enter in a number box of the Live controls counts as leaving it: a slider re-plans on release,
  // which Gradio fires when its box loses focus but not on Enter (max new tokens re-plans on blur too)
  document.addEventListener("keydown", (event) => {
    const box = event.target;
    if (event.key === "Enter" && box instanceof HTMLInputElement && box.type === "number"
        && box.closest(".sq-controls")) {
      box.blur();
    }
  });
  // A value typed outside a slider's range is brought inside it before Gradio reads it (capture
  // phase: before the box's own blur). Gradio sent the release with the raw value, which was
  // refused, then snapped the box to its bound without an event: the page showed the old plan
  // beside a budget that Generate then ran (a budget of 0 ran as n=1).
  document.addEventListener("blur", (event) => {
    const box = event.target;
    if (!(box instanceof HTMLInputElement) || box.type !== "number" || !box.closest(".sq-controls")) return;
    const slider = box.closest(".block")?.querySelector('input[type="range"]');
    if (!slider || box.value === "") return;   // (an emptied box: see the note in tests/test_browser.py)
    const low = Number(slider.min), high = Number(slider.max), value = Number(box.value);
    if (Number.isNaN(value) || (value >= low && value <= high)) return;
    box.value = String(Math.min(Math.max(value, low), high));
    box.dispatchEvent(new Event("input", { bubbles: true }));
  }, true);
}
