// otel-blame web UI: progressive enhancement only (every page works without it).
// Drag-and-drop onto the upload zone and the chosen file's name; on a run page, going to a step
// (the overview strip, a candidate link, a #step-N address) opens the collapsed run that holds it.
// Nothing is sent anywhere but this server.
"use strict";
function revealStep() {
  var target = location.hash && document.getElementById(location.hash.slice(1));
  if (!target) { return; }
  for (var node = target.parentElement; node; node = node.parentElement) {
    if (node.tagName === "DETAILS" && node.classList.contains("quiet")) { node.open = true; }
  }
  target.scrollIntoView();
}
window.addEventListener("hashchange", revealStep);
document.addEventListener("DOMContentLoaded", function () {
  revealStep();
  var zone = document.getElementById("dropzone");
  var input = document.getElementById("file");
  var label = document.getElementById("file-name");
  if (!zone || !input) { return; }
  function show() {
    label.textContent = input.files && input.files.length ? input.files[0].name + " (" + Math.ceil(input.files[0].size / 1024) + " KiB)" : "no file chosen";
    zone.classList.toggle("has-file", !!(input.files && input.files.length));
  }
  input.addEventListener("change", show);
  ["dragenter", "dragover"].forEach(function (name) {
    zone.addEventListener(name, function (event) { event.preventDefault(); zone.classList.add("dragging"); });
  });
  ["dragleave", "drop"].forEach(function (name) {
    zone.addEventListener(name, function () { zone.classList.remove("dragging"); });
  });
  zone.addEventListener("drop", function (event) {
    event.preventDefault();
    if (event.dataTransfer && event.dataTransfer.files.length) { input.files = event.dataTransfer.files; show(); }
  });
});
