/*
 * loopengine inbox: refresh the page when something on it changes. Served as a file: the page's
 * Content-Security-Policy allows no inline script.
 *
 * - Each turn the page names in data-follow ("<turnId>:<cursor>", at most a few) is followed through
 *   GET /turns/{turnId}/events after that cursor: as Server-Sent Events where the server streams
 *   (loopengine dev), else long-polled with wait=20 (API Gateway). Any new event on a parked turn
 *   (a decision from another channel, a supersede, a cancel, an expiry) means the page is stale.
 * - Every 30 s the open list (GET /pending-approvals, same filter) is compared with the ids the page
 *   listed (data-items), which also catches new items of turns the page does not follow.
 *
 * A stale page reloads itself, unless the user has typed into it (then it says so and offers a
 * reload link), and never once a form is being submitted.
 */
(function () {
  "use strict";
  var main = document.querySelector("main[data-inbox]");
  if (!main || !window.fetch) {
    return;
  }
  // absolute URLs from the origin: a page opened as http://user:password@host/inbox has those
  // credentials in its base URL, and fetch() refuses a URL that carries credentials
  var origin = window.location.origin;
  var WAIT = 20;
  var LIST_EVERY_MS = 30000;
  var RETRY_MS = 15000;
  var shown = words(main.getAttribute("data-items")).sort().join(" ");
  var edited = false;
  var leaving = false;
  var stale = false;

  function words(text) {
    return (text || "").split(" ").filter(function (w) { return w.length > 0; });
  }

  document.addEventListener("input", function () { edited = true; });
  document.addEventListener("submit", function () { leaving = true; });

  function changed() {
    if (stale || leaving) {
      return;
    }
    stale = true;
    main.setAttribute("data-stale", "true");
    if (edited) {
      var note = document.getElementById("inbox-changed");
      if (note) {
        note.hidden = false;
      }
      return;
    }
    window.location.replace(origin + main.getAttribute("data-refresh"));
  }

  function later(run, ms) {
    window.setTimeout(function () {
      if (!stale && !leaving) {
        run();
      }
    }, ms);
  }

  function readStream(response, retry) {
    var reader = response.body.getReader();
    var decoder = new TextDecoder();
    var buffer = "";
    function pump() {
      return reader.read().then(function (chunk) {
        if (chunk.done) {
          later(retry, RETRY_MS);
          return;
        }
        buffer += decoder.decode(chunk.value, { stream: true });
        if (/^event: /m.test(buffer)) {
          reader.cancel();
          changed();
          return;
        }
        buffer = buffer.slice(-200);
        return pump();
      });
    }
    return pump();
  }

  function follow(turnId, after) {
    var url = origin + "/turns/" + encodeURIComponent(turnId) + "/events?after=" + after + "&wait=" + WAIT;
    var retry = function () { follow(turnId, after); };
    fetch(url, { credentials: "same-origin", headers: { Accept: "text/event-stream, application/json" } })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        var type = response.headers.get("Content-Type") || "";
        if (type.indexOf("text/event-stream") === 0) {
          return readStream(response, retry);
        }
        return response.json().then(function (body) {
          if (body.events && body.events.length > 0) {
            changed();
          } else if (!body.finished) {
            later(function () { follow(turnId, body.next); }, 0);
          }
        });
      })
      .catch(function () { later(retry, RETRY_MS); });
  }

  function pollList() {
    fetch(origin + main.getAttribute("data-list"), { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.json();
      })
      .then(function (body) {
        var now = body.items.map(function (i) { return i.pendingId; }).sort().join(" ");
        if (now !== shown) {
          changed();
        } else {
          later(pollList, LIST_EVERY_MS);
        }
      })
      .catch(function () { later(pollList, LIST_EVERY_MS); });
  }

  words(main.getAttribute("data-follow")).forEach(function (entry) {
    var parts = entry.split(":");
    follow(parts[0], Number(parts[1]) || 0);
  });
  later(pollList, LIST_EVERY_MS);
})();
