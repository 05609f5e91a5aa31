// Ledgerflow console: progressive enhancement only; every page works without it.
document.addEventListener("DOMContentLoaded", function () {
  var all = document.getElementById("select-all");
  if (all) {
    all.addEventListener("change", function () {
      document.querySelectorAll('input[name="job_ids"]').forEach(function (box) { box.checked = all.checked; });
    });
  }
});
