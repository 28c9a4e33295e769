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
}
