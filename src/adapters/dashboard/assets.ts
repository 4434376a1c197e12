/**
 * The dashboard's only static files, served from `/assets/`: a small stylesheet and a small script. No build step:
 * they are written here as they are served. Serving them as files (not inline) lets the Content-Security-Policy
 * allow scripts and styles from the dashboard itself only.
 */

/** `/assets/app.css`: a light, plain theme. */
export const css = `
:root { --fg: #1d2330; --muted: #6b7280; --line: #e5e7eb; --bg: #ffffff; --panel: #f8fafc; --accent: #2563eb;
  --ok: #15803d; --ok-bg: #dcfce7; --err: #b91c1c; --err-bg: #fee2e2; --warn: #92400e; --warn-bg: #fef3c7; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
  background: var(--bg); }
header { display: flex; align-items: center; gap: 24px; padding: 10px 24px; border-bottom: 1px solid var(--line);
  background: var(--panel); flex-wrap: wrap; }
header .brand { font-weight: 700; font-size: 16px; letter-spacing: .02em; }
header nav a { margin-right: 16px; color: var(--fg); text-decoration: none; padding: 4px 0; }
header nav a.active { border-bottom: 2px solid var(--accent); font-weight: 600; }
header .right { margin-left: auto; display: flex; gap: 12px; align-items: center; color: var(--muted); font-size: 13px; }
main { padding: 16px 24px 40px; max-width: 1400px; }
h1 { font-size: 20px; margin: 4px 0 14px; }
h2 { font-size: 15px; margin: 22px 0 8px; }
a { color: var(--accent); }
table { border-collapse: collapse; width: 100%; font-size: 13px; }
th, td { text-align: left; padding: 6px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { font-weight: 600; color: var(--muted); background: var(--panel); white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.wrap { word-break: break-word; max-width: 480px; }
code, pre, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; }
pre { background: var(--panel); border: 1px solid var(--line); padding: 8px; white-space: pre-wrap;
  word-break: break-word; max-height: 480px; overflow: auto; }
.muted { color: var(--muted); }
.rel { font-size: 12px; margin-left: 4px; white-space: nowrap; }
time { white-space: nowrap; }
.badge { display: inline-block; padding: 1px 7px; border-radius: 10px; font-size: 12px; font-weight: 600;
  background: var(--panel); border: 1px solid var(--line); }
.badge.ok, .badge.success, .badge.green { color: var(--ok); background: var(--ok-bg); border-color: transparent; }
.badge.error, .badge.failed, .badge.red { color: var(--err); background: var(--err-bg); border-color: transparent; }
.badge.processing, .badge.running { color: var(--warn); background: var(--warn-bg); border-color: transparent; }
.badge.pending, .badge.queued { color: #1e40af; background: #dbeafe; border-color: transparent; }
.badge.waiting { color: #6b21a8; background: #f3e8ff; border-color: transparent; }
.flow { display: flex; gap: 18px; overflow-x: auto; align-items: flex-start; padding-bottom: 8px; }
.flow-column { display: flex; flex-direction: column; gap: 8px; min-width: 170px; }
.flow-step { border: 1px solid var(--line); border-radius: 6px; padding: 6px 8px; font-size: 12px; }
.flow-step.current { border-color: var(--accent); box-shadow: 0 0 0 1px var(--accent); }
.dot { display: inline-block; width: 10px; height: 10px; border-radius: 50%; margin-right: 3px; background: #cbd5e1; }
.dot.success { background: var(--ok); } .dot.failed { background: var(--err); }
.dot.running, .dot.pending { background: #f59e0b; } .dot.skipped { background: #94a3b8; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 8px 32px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; margin-bottom: 16px; }
.card h2 { margin-top: 0; }
.card svg { display: block; max-height: 240px; }
.switch { display: flex; align-items: center; gap: 14px; }
.switch .state { font-size: 16px; font-weight: 700; }
form.filters { display: flex; gap: 10px; flex-wrap: wrap; align-items: end; margin-bottom: 12px; padding: 10px 12px;
  background: var(--panel); border: 1px solid var(--line); border-radius: 8px; }
form.filters label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); gap: 2px; }
input, select, button { font: inherit; font-size: 13px; padding: 4px 8px; border: 1px solid #cbd5e1;
  border-radius: 6px; background: #fff; color: var(--fg); }
button { cursor: pointer; background: #fff; }
button.primary { background: var(--accent); border-color: var(--accent); color: #fff; }
button.danger { color: var(--err); border-color: #fca5a5; }
form.inline { display: inline; margin: 0; }
td form.inline button, td button { padding: 1px 8px; font-size: 12px; }
.pager { display: flex; gap: 16px; margin: 12px 0; }
.banner { padding: 10px 14px; border-radius: 8px; margin-bottom: 14px; }
.banner.error { background: var(--err-bg); color: var(--err); }
.banner.info { background: #dbeafe; color: #1e3a8a; }
#flash:empty { display: none; }
#flash { padding: 8px 12px; border-radius: 6px; margin-bottom: 12px; background: #dbeafe; color: #1e3a8a; }
#flash.refused { background: var(--err-bg); color: var(--err); }
.legend span { margin-right: 14px; font-size: 12px; color: var(--muted); }
.legend i { display: inline-block; width: 10px; height: 10px; margin-right: 4px; vertical-align: -1px; }
.legend i.ok { background: #22c55e; } .legend i.error { background: #ef4444; }
dl.fields { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; margin: 0 0 12px; }
dl.fields dt { color: var(--muted); } dl.fields dd { margin: 0; word-break: break-word; }
.live-state::before { content: "●"; margin-right: 4px; color: #94a3b8; }
.live-state.on::before { color: #22c55e; }
.live-state.off::before { color: #ef4444; }
`

/**
 * `/assets/app.js`. Three jobs:
 * 1. the token: a valid `?token=` never reaches the page (the server turns it into an HttpOnly session cookie and
 *    redirects); one it did not accept is taken out of the address into sessionStorage at once, so it is neither
 *    bookmarked nor left in the history; or it is typed into the header's token field;
 * 2. actions: forms marked `data-action` are sent with `fetch` (POST, `Authorization: Bearer <token>`, the page's
 *    CSRF field), and the answer is shown in the flash line;
 * 3. live updates: an EventSource on `/events`; on each change the page is fetched again and its `data-live`
 *    sections replaced (at most once a second), leaving filter forms and focus alone. The fetch says it is a refresh
 *    (`x-kairos-refresh`): the server may answer with the page as read a moment ago (Paced.ts).
 */
export const js = `
(function () {
  "use strict";
  var KEY = "kairos.dashboard.token";
  var body = document.body;
  var base = body.getAttribute("data-base") || "";
  var url = new URL(location.href);
  var fromUrl = url.searchParams.get("token");
  if (fromUrl !== null) {
    if (fromUrl !== "") sessionStorage.setItem(KEY, fromUrl);
    url.searchParams.delete("token");
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
  var token = function () { return sessionStorage.getItem(KEY) || ""; };

  var flash = document.getElementById("flash");
  var say = function (message, ok) {
    if (!flash) return;
    flash.textContent = message;
    flash.className = ok ? "" : "refused";
  };

  var session = body.getAttribute("data-session") === "on";
  var tokenState = function () {
    var known = token() !== "" || session;
    document.querySelectorAll("[data-token-set]").forEach(function (el) { el.hidden = !known; });
    document.querySelectorAll("[data-token-unset]").forEach(function (el) { el.hidden = known; });
  };
  tokenState();

  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!(form instanceof HTMLFormElement)) return;
    if (form.hasAttribute("data-token-form")) {
      event.preventDefault();
      var input = form.querySelector("input[name=token]");
      if (input && input.value !== "") sessionStorage.setItem(KEY, input.value);
      if (input) input.value = "";
      tokenState();
      return;
    }
    if (form.hasAttribute("data-forget-token")) {
      sessionStorage.removeItem(KEY);
      // A session cookie is forgotten by the server: the form posts to /logout.
      if (session) return;
      event.preventDefault();
      tokenState();
      return;
    }
    if (!form.hasAttribute("data-action")) return;
    event.preventDefault();
    var headers = { accept: "application/json" };
    if (token() !== "") headers.authorization = "Bearer " + token();
    fetch(form.action, { method: "POST", body: new URLSearchParams(new FormData(form)), headers: headers,
      credentials: "same-origin" })
      .then(function (response) {
        return response.json().then(function (answer) { return answer; }, function () {
          return { ok: false, message: "refused: " + response.status };
        });
      })
      .then(function (answer) {
        say(answer.message, answer.ok === true);
        if (answer.ok === true) refresh();
      }, function () { say("the dashboard did not answer", false); });
  });

  var liveState = document.getElementById("live-state");
  var setLive = function (state, text) {
    if (!liveState) return;
    liveState.className = "live-state " + state;
    liveState.textContent = text;
  };

  var busy = false, again = false, last = 0, timer = null, held = null;
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    fetch(location.href, { headers: { accept: "text/html", "x-kairos-refresh": "1" }, credentials: "same-origin" })
      .then(function (response) {
        // The page as read a moment ago, which may predate the change: asked again once the server reads afresh.
        var wait = Number(response.headers.get("x-kairos-held") || 0);
        if (wait > 0 && held === null) held = setTimeout(function () { held = null; schedule(); }, wait);
        return response.text();
      })
      .then(function (text) {
        var next = new DOMParser().parseFromString(text, "text/html");
        document.querySelectorAll("[data-live]").forEach(function (el) {
          var fresh = el.id ? next.getElementById(el.id) : null;
          if (fresh) el.replaceWith(document.importNode(fresh, true));
          else if (el.id === "banner") el.innerHTML = "";
        });
        var banner = next.getElementById("banner");
        var mine = document.getElementById("banner");
        if (banner && mine) mine.replaceWith(document.importNode(banner, true));
        tokenState();
      }, function () { setLive("off", "dashboard unreachable"); })
      .then(function () {
        busy = false;
        last = Date.now();
        if (again) { again = false; schedule(); }
      });
  }
  function schedule() {
    if (timer !== null) return;
    var wait = Math.max(150, 1000 - (Date.now() - last));
    timer = setTimeout(function () { timer = null; refresh(); }, wait);
  }

  if (body.getAttribute("data-live") === "on" && typeof EventSource === "function") {
    var source = new EventSource(base + "/events");
    source.addEventListener("open", function () { setLive("on", "live"); });
    source.addEventListener("change", function () { setLive("on", "live"); schedule(); });
    source.addEventListener("error", function () { setLive("off", "reconnecting…"); });
    window.addEventListener("pagehide", function () { source.close(); });
  }
})();
`
