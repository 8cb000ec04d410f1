// agentmesh's local page: live updates. The page works without this file;
// with it, the view reloads its main part when the daemon reports a change
// (server-sent events, the stream `agentmesh watch` reads), and the peers
// view every few seconds. Nothing here reads text from the mesh: the new
// part is HTML the daemon escaped, parsed as a document (its scripts never
// run) and swapped in.
"use strict";
(function () {
  const live = document.getElementById("live");
  const body = document.body;
  // A form that failed answers at its own address (`/held/ID/approve`):
  // the view's address is what to reload, and what the bar shows.
  const path = body.dataset.path || location.pathname;
  if (location.pathname !== path) history.replaceState(null, "", path);
  // At most one reload every MIN_GAP ms, however chatty the mesh is.
  const MIN_GAP = 2000;
  let last = 0;
  let pending = null;
  let pointerDown = false;
  document.addEventListener("pointerdown", function () { pointerDown = true; }, true);
  document.addEventListener("pointerup", function () { pointerDown = false; }, true);

  // Never swap the page under a person: while they type in a form, press
  // or focus a button, the page says there is more instead.
  function busy() {
    const a = document.activeElement;
    if (pointerDown) return true;
    // A form that failed shows why, and keeps what was typed: a reload
    // would wipe both.
    if (document.querySelector(".error")) return true;
    if (!a) return false;
    if (a.tagName === "BUTTON") return true;
    return (a.tagName === "TEXTAREA" || a.tagName === "INPUT") && a.value !== "";
  }

  async function refresh() {
    pending = null;
    if (busy()) {
      body.classList.add("stale");
      return;
    }
    last = Date.now();
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
    body.classList.remove("stale");
  }

  function soon() {
    if (pending !== null) return;
    pending = setTimeout(refresh, Math.max(150, last + MIN_GAP - Date.now()));
  }

  // One event stream per visible tab: a hidden tab closes its own, so
  // many open tabs don't hold every connection the browser allows.
  let events = null;
  function connect() {
    if (events || !window.EventSource) return;
    events = new EventSource("/events");
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
  function disconnect() {
    if (!events) return;
    events.close();
    events = null;
    live.textContent = "paused";
    live.classList.remove("on");
  }
  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      disconnect();
    } else {
      connect();
      soon();
    }
  });
  window.addEventListener("pagehide", disconnect);
  if (!document.hidden) connect();

  const every = Number(body.dataset.refresh || 0);
  if (every > 0) {
    setInterval(function () {
      if (!document.hidden) soon();
    }, every * 1000);
  }
})();
