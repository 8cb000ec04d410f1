// agentmesh's local page: live updates. The page works without this file;
// with it, the view reloads its main part when the daemon reports a change
// (server-sent events, the stream `agentmesh watch` reads), and the peers
// view every few seconds. Nothing here reads text from the mesh: the new
// part is HTML the daemon escaped, parsed as a document (its scripts never
// run) and swapped in.
"use strict";
(function () {
  const live = document.getElementById("live");
  let pending = null;

  // Typing in a form is never interrupted: the page says there is more.
  function typing() {
    const a = document.activeElement;
    return a && (a.tagName === "TEXTAREA" || a.tagName === "INPUT") && a.value !== "";
  }

  async function refresh() {
    pending = null;
    if (typing()) {
      document.body.classList.add("stale");
      return;
    }
    let response;
    try {
      response = await fetch(location.href, { credentials: "same-origin", cache: "no-store" });
    } catch (e) {
      return;
    }
    if (!response.ok) return;
    const doc = new DOMParser().parseFromString(await response.text(), "text/html");
    const fresh = doc.getElementById("main");
    const main = document.getElementById("main");
    const nav = doc.querySelector("nav");
    if (fresh && main) main.replaceWith(fresh);
    if (nav) document.querySelector("nav").replaceWith(nav);
    document.body.classList.remove("stale");
  }

  function soon() {
    if (pending === null) pending = setTimeout(refresh, 150);
  }

  if (window.EventSource) {
    const events = new EventSource("/events");
    events.onopen = function () {
      live.textContent = "live";
      live.title = "live updates: on";
      live.classList.add("on");
    };
    events.onerror = function () {
      live.textContent = "offline";
      live.title = "live updates: the daemon is not answering; retrying";
      live.classList.remove("on");
    };
    events.addEventListener("change", soon);
  }
  const every = Number(document.body.dataset.refresh || 0);
  if (every > 0) {
    setInterval(function () {
      if (!document.hidden) refresh();
    }, every * 1000);
  }
})();
