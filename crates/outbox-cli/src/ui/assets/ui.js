// The operator page's only script: apply each snapshot the server pushes.
// The HTML comes rendered by the server, every value escaped there.
"use strict";
(function () {
  var live = document.getElementById("live");
  if (!live) return; // a detail or confirmation page
  var rows = document.getElementById("dead-rows");
  var conn = document.getElementById("conn");
  var source = new EventSource("/events");
  source.addEventListener("snapshot", function (e) {
    var s = JSON.parse(e.data);
    live.innerHTML = s.live;
    // A filtered list is the viewer's own query, and a selection in
    // progress must not vanish under the pointer.
    if (rows && rows.dataset.filtered !== "1" && !rows.querySelector("input:checked")) {
      rows.innerHTML = s.dead;
    }
    conn.textContent = "live";
    conn.className = "ok";
  });
  source.onerror = function () {
    // EventSource reconnects by itself (the server ends each connection
    // after a minute).
    conn.textContent = "reconnecting…";
    conn.className = "";
  };
})();
