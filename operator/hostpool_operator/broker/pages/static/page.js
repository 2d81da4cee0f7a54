// The portal page: one tile per pool the user may use, drawn from the /v1/pools answer the
// server put in the page, then kept current by /v1/events (server-sent events; polling
// /v1/pools every 5 s while the stream is down). Connect downloads the .rdp file, Open in
// browser opens /desktop/NS/POOL, Log off ends the session. Every change carries the page's
// CSRF token (the meta element); no token of the identity provider ever reaches this script.
"use strict";

(() => {
  const POLL_MS = 5000;
  const MAX_WAIT_ROUNDS = 120;
  const csrf = document.querySelector('meta[name="hostpool-csrf"]').content;
  const text = JSON.parse(document.getElementById("hostpool-strings").textContent);
  const list = document.getElementById("pools");
  const noPools = document.getElementById("no-pools");
  const paused = document.getElementById("live-paused");
  const announce = document.getElementById("announce");
  const tiles = new Map();
  let events = null;
  let pollTimer = null;
  let signedOut = false;

  const say = (key, values = {}) =>
    (text[key] ?? key).replace(/\{(\w+)\}/g, (place, name) => (name in values ? values[name] : place));
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const keyOf = (pool) => `${pool.namespace}/${pool.name}`;
  const base = (pool) =>
    `/v1/namespaces/${encodeURIComponent(pool.namespace)}/pools/${encodeURIComponent(pool.name)}`;

  // What the tile says of the pool: [data-availability, text]. A personal pool's is the
  // caller's own desktop's power (or, without one, whether a connect makes one).
  function availability(pool) {
    if (pool.type === "Personal") {
      const desktop = pool.desktop;
      if (!desktop) {
        const kind = pool.assignment === "Automatic" ? "desktop_new" : "desktop_none";
        return [kind, say(kind)];
      }
      const kind = `desktop_${desktop.power.toLowerCase()}`;
      return [kind, say(kind, { host: desktop.host })];
    }
    if (pool.available) return ["ready", say("ready")];
    return pool.hostsStarting ? ["starting", say("starting")] : ["full", say("full")];
  }

  function sessionText(session) {
    if (!session) return say("no_session");
    const state = text[`state_${session.state}`] ?? session.state;
    return session.host ? say("session_on", { state, host: session.host }) : say("session", { state });
  }

  // A button whose accessible name is its visible label and the pool's name.
  function button(action, label, extra) {
    const element = document.createElement("button");
    element.type = "button";
    element.dataset.action = action;
    element.append(label);
    const hidden = document.createElement("span");
    hidden.className = "visually-hidden";
    element.append(hidden);
    element._extra = extra;
    return element;
  }

  function newTile(pool) {
    const tile = document.createElement("li");
    tile.className = "tile";
    tile.dataset.pool = keyOf(pool);
    const heading = document.createElement("h3");
    const avail = document.createElement("p");
    avail.className = "availability";
    const session = document.createElement("p");
    session.className = "session";
    const actions = document.createElement("div");
    actions.className = "actions";
    const connect = button("connect", say("connect"), "");
    const browser = button("browser", say("browser"), ` ${say("new_tab")}`);
    const logoff = button("logoff", say("logoff"), "");
    logoff.classList.add("secondary");
    browser.classList.add("secondary");
    actions.append(connect, browser, logoff);
    const message = document.createElement("p");
    message.className = "message";
    message.setAttribute("role", "status");
    tile.append(heading, avail, session, actions, message);
    const parts = { tile, heading, avail, session, connect, browser, logoff, message, pool };
    connect.addEventListener("click", () => runConnect(parts));
    browser.addEventListener("click", () => openInBrowser(parts.pool));
    logoff.addEventListener("click", () => runLogoff(parts));
    return parts;
  }

  function update(parts, pool, first) {
    parts.pool = pool;
    const name = pool.displayName || pool.name;
    parts.heading.textContent = name;
    for (const control of [parts.connect, parts.browser, parts.logoff]) {
      control.lastChild.textContent = ` ${name}${control._extra}`;
    }
    const [kind, shown] = availability(pool);
    if (!first && parts.avail.dataset.availability !== kind && pool.type === "Personal") {
      announce.textContent = `${name}: ${shown}`;
    }
    parts.avail.dataset.availability = kind;
    parts.avail.textContent = shown;
    const state = pool.session ? pool.session.state : "";
    const described = sessionText(pool.session);
    if (!first && (parts.tile.dataset.state !== state || parts.session.textContent !== described)) {
      announce.textContent = `${name}: ${described}`;
    }
    parts.tile.dataset.state = state;
    parts.session.textContent = described;
    parts.browser.hidden = !pool.web;
    parts.logoff.hidden = !pool.session;
  }

  function render(body, first = false) {
    const seen = new Set();
    for (const pool of body.pools) {
      const key = keyOf(pool);
      seen.add(key);
      let parts = tiles.get(key);
      const fresh = !parts;
      if (fresh) {
        parts = newTile(pool);
        tiles.set(key, parts);
      }
      update(parts, pool, first || fresh);
      list.append(parts.tile); // in the answer's order; a tile kept keeps its focus
    }
    for (const [key, parts] of tiles) {
      if (!seen.has(key)) {
        parts.tile.remove();
        tiles.delete(key);
      }
    }
    noPools.hidden = body.pools.length > 0;
  }

  function showSignedOut() {
    signedOut = true;
    if (events) events.close();
    clearInterval(pollTimer);
    document.getElementById("main").hidden = true;
    document.getElementById("signed-out").hidden = false;
  }

  async function reason(response) {
    try {
      const body = await response.json();
      return body.message || body.reason || `HTTP ${response.status}`;
    } catch (_) {
      return `HTTP ${response.status}`;
    }
  }

  async function call(method, path, accept) {
    const response = await fetch(path, {
      method,
      credentials: "same-origin",
      headers: { Accept: accept, "X-Hostpool-CSRF": csrf },
    });
    if (response.status === 401) showSignedOut();
    return response;
  }

  function download(blob, name) {
    const url = URL.createObjectURL(blob);
    const link = document.createElement("a");
    link.href = url;
    link.download = name;
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  }

  // What a connect that waits is doing, in the person's words, with the seconds so far.
  function waitingText(body, began) {
    const seconds = Math.round((Date.now() - began) / 1000);
    const step = { HostsStarting: "waiting_start", PoolSaturated: "waiting_room" }[body.reason];
    return step ? say(step, { seconds }) : say("waiting");
  }

  async function failedText(response) {
    let body = {};
    try {
      body = await response.clone().json();
    } catch (_) {
      // not JSON: the status says it
    }
    const message = await reason(response);
    return body.connect
      ? say("failed_reference", { message, ref: body.connect })
      : say("failed", { message });
  }

  async function runConnect(parts) {
    parts.connect.disabled = true;
    const began = Date.now();
    try {
      for (let round = 0; round < MAX_WAIT_ROUNDS && !signedOut; round++) {
        const signOn = Boolean(parts.pool.singleSignOn);
        const accept = signOn ? "application/json" : "application/x-rdp";
        const response = await call("POST", `${base(parts.pool)}/connect`, accept);
        if (response.status === 200) {
          const file = `${parts.pool.name}.rdp`;
          if (!signOn) {
            download(new Blob([await response.blob()], { type: "application/x-rdp" }), file);
            parts.message.textContent = say("downloaded", { file });
            return;
          }
          // The file never holds the one-time password: it is shown to copy into the client.
          const answer = await response.json();
          download(new Blob([answer.rdpFile], { type: "application/x-rdp" }), file);
          showLogon(parts, file, answer.logon);
          return;
        }
        if (response.status !== 202 && response.status !== 503) {
          if (response.status !== 401) {
            parts.message.textContent = await failedText(response);
          }
          return;
        }
        let waitBody = {};
        try {
          waitBody = await response.clone().json();
        } catch (_) {
          // a 503 without a body: waiting all the same
        }
        parts.message.textContent = waitingText(waitBody, began);
        parts.tile.dataset.connect = waitBody.connect || "";
        const wait = Number(response.headers.get("Retry-After")) || 2;
        await sleep(Math.min(Math.max(wait, 1), 60) * 1000);
      }
    } catch (error) {
      parts.message.textContent = say("failed", { message: String(error.message || error) });
    } finally {
      parts.connect.disabled = false;
    }
  }

  function showLogon(parts, file, logon) {
    const until = new Date(logon.expiresAt).toLocaleTimeString();
    parts.message.textContent = say("downloaded_signon", { file, until });
    const secret = document.createElement("code");
    secret.className = "one-time-password";
    secret.dataset.logon = "password";
    secret.textContent = logon.password;
    const copy = document.createElement("button");
    copy.type = "button";
    copy.dataset.action = "copy-password";
    copy.textContent = say("copy_password");
    copy.addEventListener("click", () => {
      navigator.clipboard.writeText(logon.password).then(
        () => { copy.textContent = say("copied"); },
        () => { copy.textContent = say("copy_failed"); },
      );
    });
    parts.message.append(" ", secret, " ", copy);
  }

  function openInBrowser(pool) {
    const path = `/desktop/${encodeURIComponent(pool.namespace)}/${encodeURIComponent(pool.name)}`;
    window.open(path, "_blank", "noopener");
  }

  async function runLogoff(parts) {
    parts.logoff.disabled = true;
    try {
      const response = await call("DELETE", `${base(parts.pool)}/session`, "application/json");
      if (response.status === 202 || response.status === 404) {
        parts.message.textContent = say("logging_off");
      } else if (response.status !== 401) {
        parts.message.textContent = say("failed", { message: await reason(response) });
      }
    } catch (error) {
      parts.message.textContent = say("failed", { message: String(error.message || error) });
    } finally {
      parts.logoff.disabled = false;
    }
  }

  async function poll() {
    try {
      const response = await call("GET", "/v1/pools", "application/json");
      if (response.ok) render(await response.json());
    } catch (_) {
      // the broker is out of reach: the next round tries again
    }
  }

  function startPolling() {
    if (pollTimer === null && !signedOut) {
      paused.hidden = false;
      document.documentElement.dataset.live = "polling";
      pollTimer = setInterval(poll, POLL_MS);
    }
  }

  function stopPolling() {
    clearInterval(pollTimer);
    pollTimer = null;
    paused.hidden = true;
    document.documentElement.dataset.live = "events";
  }

  function listen() {
    if (!("EventSource" in window)) {
      startPolling();
      return;
    }
    events = new EventSource("/v1/events");
    events.addEventListener("open", stopPolling);
    events.addEventListener("pools", (event) => render(JSON.parse(event.data)));
    // The browser reconnects by itself after a dropped stream; until it has, and for
    // good when the stream was refused (closed), the page polls.
    events.addEventListener("error", startPolling);
  }

  render(JSON.parse(document.getElementById("hostpool-pools").textContent), true);
  listen();
})();
