// Refreshes the overview's numbers and chart every few seconds; the page works without it.
(function () {
  var box = document.getElementById("overview");
  if (!box || !window.fetch) return;
  var url = box.getAttribute("data-refresh");
  function refresh() {
    fetch(url, { credentials: "same-origin" })
      .then(function (r) { if (r.status === 401) { window.location.reload(); } return r.ok ? r.text() : null; })
      .then(function (html) { if (html) box.innerHTML = html; })
      .catch(function () {})
      .then(function () { window.setTimeout(refresh, 2000); });
  }
  window.setTimeout(refresh, 2000);
})();
