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
  // A box emptied and left gets back the value it had when entered (Gradio sent null, refused,
  // then snapped the box to its minimum without a plan). By then the slider already holds the
  // emptied value, so the value on entering is kept here.
  const sliderBox = (box) => box instanceof HTMLInputElement && box.type === "number" && box.closest(".sq-controls")
    ? box.closest(".block")?.querySelector('input[type="range"]') : null;
  document.addEventListener("focus", (event) => {
    if (sliderBox(event.target)) event.target.dataset.sqEntered = event.target.value;
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
    const low = Number(slider.min), high = Number(slider.max), value = Number(box.value);
    if (Number.isNaN(value) || (value >= low && value <= high)) return;
    box.value = String(Math.min(Math.max(value, low), high));
    box.dispatchEvent(new Event("input", { bubbles: true }));
  }, true);
}
