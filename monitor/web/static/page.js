// invmon status page: a little enhancement over plain HTML. Every `data-refresh` seconds the
// page fetches its own URL (filters included) and swaps the #live region in place, so the
// scroll position, the focus and what is typed in the search box are kept; a button pauses
// it (moving content must be stoppable: WCAG 2.2.2). Filters apply as soon as a choice
// changes. Without JavaScript the page works as plain links and a form, without updates.
(function () {
  "use strict";
  var seconds = parseInt(document.body.getAttribute("data-refresh") || "0", 10);
  var form = document.querySelector("form.filters");
  if (form) {
    Array.prototype.forEach.call(form.querySelectorAll("select"), function (select) {
      select.addEventListener("change", function () { form.submit(); });
    });
  }
  if (!seconds || seconds < 1 || !window.fetch || !window.DOMParser) { return; }
  var paused = false;
  var top = document.querySelector("header.top");
  if (top) {
    var button = document.createElement("button");
    button.type = "button";
    button.className = "pause";
    button.setAttribute("aria-pressed", "false");
    button.textContent = "Pause updates";
    button.addEventListener("click", function () {
      paused = !paused;
      button.setAttribute("aria-pressed", paused ? "true" : "false");
      button.textContent = paused ? "Resume updates" : "Pause updates";
    });
    top.appendChild(button);
  }
  function refresh() {
    if (document.hidden || paused) { schedule(); return; }
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Invmon-Refresh": "1" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (text) {
        // Paused while the answer was on its way: nothing moves once the button is pressed.
        if (text && !paused) {
          var fresh = new DOMParser().parseFromString(text, "text/html");
          var live = document.getElementById("live");
          var next = fresh.getElementById("live");
          if (live && next) {
            var x = window.scrollX, y = window.scrollY;
            live.replaceWith(document.importNode(next, true));
            window.scrollTo(x, y);
          }
          var when = fresh.getElementById("generated");
          var here = document.getElementById("generated");
          if (when && here) { here.textContent = when.textContent; }
          if (fresh.title) { document.title = fresh.title; }
        }
      })
      .catch(function () { /* the next turn tries again */ })
      .then(schedule);
  }
  function schedule() { window.setTimeout(refresh, seconds * 1000); }
  schedule();
})();
