// The desktop page: the user's session of one pool in the browser. It makes sure the user
// has a placed session (POST connect, waiting as told), takes a one-use ticket, and connects
// IronRDP's web component through the broker's relay (RDCleanPath over a WebSocket). The
// page root's data-desktop-state is idle, connecting, connected, reconnecting, closed or error. The desktop
// takes the page's size (in device pixels) at connect and follows the window's (RDP display
// control); a fullscreen control fills the screen. The browser's keyboard layout goes with
// the connection (keyboard.js).

import { chosenLayout, layoutSelector } from "./keyboard.js";

const root = document.getElementById("desktop");
const form = document.getElementById("logon");
const password = document.getElementById("password");
const statusLine = document.getElementById("status");
const screen = document.getElementById("screen");
const disconnectButton = document.querySelector('[data-action="disconnect"]');
const fullscreenButton = document.querySelector('[data-action="fullscreen"]');
const csrf = document.querySelector('meta[name="hostpool-csrf"]').content;
const { namespace, pool, user, rdpModule, componentModule } = root.dataset;
const base = `/v1/namespaces/${encodeURIComponent(namespace)}/pools/${encodeURIComponent(pool)}`;
// The page's strings in its language (the server chose it from Accept-Language).
const text = JSON.parse(document.getElementById("hostpool-strings").textContent);
// The pool's clipboard setting (HostPool spec.connection.clipboard).
const clipboard = root.dataset.clipboard === "true";

// The client sets its clipboard up after its ready event, once the browser has answered
// whether the page may read the clipboard: a connect before that has no clipboard. The
// client asked first, so once this page's answer is in, the client's has come and its
// set-up (synchronous after the answer) is done; 10 ms more for good measure. (A 100 ms
// margin here cost the first frame about 75 ms: make bench-portal.)
async function clipboardSetUp() {
  try {
    await navigator.permissions.query({ name: "clipboard-read" });
  } catch (_) {
    // not a permission this browser knows: the client finds that out too
  }
  await sleep(10);
}

function t(key, values) {
  return (text[key] ?? key).replace(/\{(\w+)\}/g, (place, name) => values?.[name] ?? place);
}

let backend = null;
let ui = null;

function show(state, text) {
  root.dataset.desktopState = state;
  statusLine.textContent = text;
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// A 429's Retry-After in milliseconds (1 to 30 s; 1 s when it says nothing usable).
function retryAfter(response) {
  const seconds = Number(response.headers.get("Retry-After"));
  return Math.min(Math.max(Number.isFinite(seconds) ? seconds : 1, 1), 30) * 1000;
}

// A 429 (too many calls) is waited out as the broker asks and tried again, a few times: a
// page that reconnects again and again must not keep its own user's rate limit spent.
async function post(path, body) {
  for (let tries = 1; ; tries++) {
    const response = await fetch(base + path, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json", "X-Hostpool-CSRF": csrf },
      body: JSON.stringify(body ?? {}),
    });
    if (response.status !== 429 || tries >= 5) return response;
    await sleep(retryAfter(response));
  }
}

async function failure(response) {
  let message = `HTTP ${response.status}`;
  try {
    message = (await response.json()).message || message;
  } catch (_) {
    // not JSON: the status says enough
  }
  return new Error(message);
}

// The user's session placed on a host (a new one is asked for; a waiting one waited for).
async function placed() {
  for (let round = 0; round < 120; round++) {
    const response = await post("/connect");
    if (response.status === 200) return response.json();
    // 202: not placed yet; 503 with Retry-After: placed on a host whose address is not
    // known yet (its agent about to report), or the broker not ready: both pass.
    const passing = response.status === 503 && response.headers.get("Retry-After");
    if (response.status !== 202 && !passing) throw await failure(response);
    show("connecting", t("waiting"));
    const wait = Number(response.headers.get("Retry-After") || "2");
    await sleep(Math.min(Math.max(wait, 1), 30) * 1000);
  }
  throw new Error(t("desktop_no_host"));
}

async function loadClient() {
  if (backend === null) {
    const [rdp] = await Promise.all([import(rdpModule), import(componentModule)]);
    await rdp.init("WARN");
    backend = rdp;
  }
  return backend;
}

function component(rdp) {
  const element = document.createElement("iron-remote-desktop");
  element.module = rdp.Backend;
  element.setAttribute("scale", "fit");
  element.setAttribute("flexcenter", "true");
  const ready = new Promise((resolve) => {
    element.addEventListener("ready", (event) => resolve(event.detail.irgUserInteraction), { once: true });
  });
  screen.replaceChildren(element);
  return { element, ready };
}

// A new component of the web client, ready (and its clipboard set up where the pool allows
// one): { rdp, element, made: its user-interaction object }.
async function readyClient() {
  const rdp = await loadClient();
  const { element, ready } = component(rdp);
  const made = await ready;
  if (clipboard) await clipboardSetUp();
  return { rdp, element, made };
}

// Resolves once the remote desktop has drawn something (any pixel that is not black or
// transparent), polling a small copy of the component's canvas.
function firstFrame(element) {
  const probe = document.createElement("canvas");
  probe.width = probe.height = 32;
  const context = probe.getContext("2d", { willReadFrequently: true });
  return new Promise((resolve) => {
    const look = () => {
      const canvas = element.shadowRoot && element.shadowRoot.querySelector("canvas");
      if (canvas && canvas.width > 0) {
        context.clearRect(0, 0, 32, 32);
        context.drawImage(canvas, 0, 0, 32, 32);
        const pixels = context.getImageData(0, 0, 32, 32).data;
        for (let i = 0; i < pixels.length; i += 4) {
          if (pixels[i + 3] > 0 && pixels[i] + pixels[i + 1] + pixels[i + 2] > 24) {
            resolve();
            return;
          }
        }
      }
      setTimeout(look, 25);
    };
    look();
  });
}

// The desktop's size: the page's (connected, the bar floats over the desktop), in device
// pixels so that it is crisp on high-DPI screens; even numbers, within what xrdp takes.
function desktopSize() {
  const ratio = window.devicePixelRatio || 1;
  const even = (css, least, most) => Math.max(least, Math.min(most, Math.floor((css * ratio) / 2) * 2));
  return { width: even(root.clientWidth, 640, 3840), height: even(root.clientHeight, 480, 2160) };
}

// Follows the window: the page's size is asked of the host (RDP display control) once the
// window has been still for RESIZE_SETTLE ms (one request per settled size, not one per pixel
// of a drag), and asked again every RESIZE_AGAIN ms, RESIZE_TRIES times at most, until the
// client draws the desktop at that size: the client drops a request made before the host's
// display-control capabilities came, and xrdp one that comes while it is still changing the
// size. (That the capabilities come at all, and that xrdp tells the client the new size, is
// the relay's doing: rdcleanpath.HostStream and the client build it writes. HostStream also
// makes xrdp's resize one the client follows: a whole Deactivate All, then nothing but the
// reactivation until its Font Map.)
// data-desktop-size is the size the desktop is drawn at once it is the page's (at connect
// too); data-resize-ms the time from the window's change (or the connect) to it.
const RESIZE_SETTLE = 300;
const RESIZE_AGAIN = 1500;
const RESIZE_TRIES = 8;
let resizing = null;
let sizeSent = null;
let sizeRound = 0;
// When the window began to change (for data-resize-ms: from there to the new size drawn).
let resizeStarted = null;

// The size the host's desktop has now, as the client draws it (its canvas; null: none yet).
function drawnSize() {
  const element = screen.firstElementChild;
  const canvas = element && element.shadowRoot && element.shadowRoot.querySelector("canvas");
  return canvas ? { width: canvas.width, height: canvas.height } : null;
}

function followWindow() {
  resizeStarted ??= performance.now();
  clearTimeout(resizing);
  const round = ++sizeRound;
  resizing = setTimeout(() => askSize(round), RESIZE_SETTLE);
}

async function askSize(round) {
  const current = () => round === sizeRound && ui !== null && root.dataset.desktopState === "connected";
  const size = desktopSize();
  const drawnIsPage = () => {
    const drawn = drawnSize();
    return drawn !== null && drawn.width === size.width && drawn.height === size.height;
  };
  for (let tries = 0; current() && tries < RESIZE_TRIES; tries++) {
    if (drawnIsPage()) break;
    sizeSent = size;
    ui.resize(size.width, size.height, Math.round((window.devicePixelRatio || 1) * 100));
    ui.setScale(1); // fit: the client sized its canvas to the request in CSS pixels
    for (const until = performance.now() + RESIZE_AGAIN; current() && !drawnIsPage() && performance.now() < until; ) {
      await sleep(50);
    }
  }
  if (current() && drawnIsPage()) {
    ui.setScale(1); // fit again, to the new size
    root.dataset.desktopSize = `${size.width}x${size.height}`;
    root.dataset.resizeMs = String(Math.round(performance.now() - resizeStarted));
    resizeStarted = null;
  }
}
window.addEventListener("resize", followWindow);

function describe(error) {
  if (error && typeof error.kind === "function") {
    const kinds = ["error", "password", "logon", "denied", "relay_refused", "relay_unreachable", "negotiation"];
    return t("desktop_failed", { kind: t(`desktop_kind_${kinds[error.kind()] ?? "error"}`) });
  }
  return String((error && error.message) || error);
}

// One connection: the placed session, a ticket, the relay; resolves with how it ended
// ({ reason } from the client, or { error }) once the session's connection is over.
async function connect(secret, again) {
  const clicked = performance.now();
  form.hidden = true;
  if (!again) show("connecting", t("desktop_connecting"));
  // The client and the keyboard layout are made ready while the session is placed and the
  // ticket fetched: neither waits on the network, and the clipboard's set-up (100 ms) is
  // no longer on the way to the first frame.
  const client = readyClient();
  client.catch(() => {}); // awaited below; a connect that fails first leaves it unread
  const layoutChosen = chosenLayout();
  await placed();
  const ticketAnswer = await post("/session/web-ticket");
  if (!ticketAnswer.ok) throw await failure(ticketAnswer);
  const ticket = await ticketAnswer.json();
  const { rdp, element, made } = await client;
  ui = made;
  ui.setKeyboardUnicodeMode(false); // scancodes: the session's layout makes the characters
  const relay = new URL(`${base}/session/web`, window.location.href);
  relay.protocol = relay.protocol === "https:" ? "wss:" : "ws:";
  const layout = await layoutChosen;
  relay.searchParams.set("keyboardLayout", layout);
  root.dataset.keyboardLayout = layout;
  const config = ui
    .configBuilder()
    .withUsername(user)
    .withPassword(secret)
    .withDestination(ticket.destination)
    .withProxyAddress(relay.href)
    .withAuthToken(ticket.ticket)
    .withServerDomain("")
    .withExtension(rdp.enableCredssp(false)) // xrdp 0.9 has no NLA: TLS, then the Client Info PDU
    .withExtension(rdp.displayControl(true)) // the desktop follows the window
    .withDesktopSize((sizeSent = desktopSize()))
    .build();
  // Text both ways between the page and the desktop (within the browser's permissions:
  // the page reads and writes the clipboard while it has the focus) only where the pool
  // allows it; otherwise the client opens no clipboard channel at all.
  ui.setEnableClipboard(clipboard);
  ui.setEnableAutoClipboard(clipboard);
  const session = await ui.connect(config);
  // The broker's clock at this connect: a disconnect a limit asks for after it is on purpose.
  connectedAt = Date.parse(ticketAnswer.headers.get("Date") || "") || Date.now();
  reconnectUntil = null;
  failedInARow = 0;
  ui.setVisibility(true);
  disconnectButton.hidden = false;
  fullscreenButton.hidden = false;
  show("connected", t("desktop_connected"));
  // data-desktop-size once the desktop is drawn at the page's size (a session reconnected
  // to keeps its size until asked), and a window resized while connecting followed. Timed
  // from this connect: a size check an earlier connection did not finish (it dropped first)
  // must not date the next resize back to it.
  resizeStarted = null;
  followWindow();
  firstFrame(element).then(() => {
    const ms = Math.round(performance.now() - clicked);
    root.dataset.firstFrameMs = String(ms);
    if (!again) post("/session/web/first-frame", { ms }).catch(() => {});
  });
  try {
    const info = await session.run();
    return { reason: info && typeof info.reason === "function" ? info.reason() : "" };
  } catch (error) {
    return { error };
  } finally {
    ui = null;
    disconnectButton.hidden = true;
    fullscreenButton.hidden = true;
  }
}

// Reconnecting by itself: a connection that drops (Wi-Fi, sleep, a relay restarted) is made
// again with a new ticket to the same session, for up to RECONNECT_FOR ms; never after the
// person's Disconnect, a logoff (their session is gone or ending), sign-out, or a disconnect a
// session limit asked for.
const RECONNECT_FOR = 60_000;
let leaving = false;
// A new keyboard layout chosen while connected: connect again at once, with it.
let relayout = false;
let connectedAt = null;
let reconnectUntil = null;
// Reconnects in a row that failed before a session was connected: each waits longer.
let failedInARow = 0;

// Whether the person's session is there to come back to: "yes", "no", or "unknown" (the
// broker could not be asked: offline, restarting).
async function comeBack() {
  try {
    const response = await fetch("/v1/pools", {
      credentials: "same-origin",
      cache: "no-store",
      headers: { Accept: "application/json" },
    });
    if (response.status === 401 || response.status === 403) return "no";
    if (!response.ok) return "unknown";
    const { pools } = await response.json();
    const mine = pools.find((p) => p.namespace === namespace && p.name === pool);
    const session = mine && mine.session;
    if (!session || !session.host) return "no";
    const asked = Date.parse(session.disconnectRequestedAt || "");
    if (!Number.isNaN(asked) && connectedAt !== null && asked >= connectedAt - 1000) return "no";
    return "yes";
  } catch (_) {
    return "unknown";
  }
}

// A client's reason for an end the host chose (a logoff, or a disconnect from the desktop).
const ON_PURPOSE = /log ?off|logged off|disconnect(ed)? by (the )?(server|user)|shut ?down/i;

async function open(secret) {
  leaving = false;
  let again = false;
  for (;;) {
    let ended;
    try {
      ended = await connect(secret, again);
    } catch (error) {
      if (reconnectUntil === null) throw error; // the first connect: say why
      ended = { error };
    }
    root.dataset.endReason = String(ended.reason ?? (ended.error && describe(ended.error)) ?? "");
    if (relayout && !leaving) {
      relayout = false;
      again = true;
      show("connecting", t("desktop_connecting"));
      continue;
    }
    if (leaving || (ended.reason && ON_PURPOSE.test(ended.reason))) break;
    reconnectUntil ??= Date.now() + RECONNECT_FOR;
    show("reconnecting", t("desktop_reconnecting"));
    // A dropped session is tried again at once; a try that failed again, after a pause
    // that doubles (0.25 s to 4 s), so a broker or host that refuses is not hammered.
    if (ended.error && failedInARow > 0) {
      await sleep(Math.min(250 * 2 ** (failedInARow - 1), 4000));
    }
    if (ended.error) failedInARow += 1;
    let answer = "unknown";
    for (let wait = 250; answer === "unknown" && Date.now() < reconnectUntil; wait = Math.min(wait * 2, 4000)) {
      answer = await comeBack();
      if (answer === "unknown") await sleep(wait);
    }
    if (answer !== "yes") break;
    again = true;
  }
  reconnectUntil = null;
  form.hidden = false;
  show("closed", t("desktop_disconnected"));
}

// Single sign-on: the relay signs the user on with a one-time credential of the broker's,
// whatever the client sends; nobody types a password.
const signOn = root.dataset.signOn === "true";
if (signOn) {
  password.required = false;
  for (const part of form.querySelectorAll("[data-password]")) part.hidden = true;
}

form.addEventListener("submit", (event) => {
  event.preventDefault();
  const secret = signOn ? "single-sign-on" : password.value;
  password.value = "";
  open(secret).catch((error) => {
    form.hidden = false;
    disconnectButton.hidden = true;
    show("error", describe(error));
  });
});

disconnectButton.addEventListener("click", () => {
  leaving = true;
  if (ui !== null) ui.shutdown();
});

// Fullscreen: the page fills the screen (the desktop follows, as on any resize); again, or
// Escape, leaves it.
fullscreenButton.addEventListener("click", () => {
  if (document.fullscreenElement) document.exitFullscreen().catch(() => {});
  else root.requestFullscreen().catch(() => {});
});

// The keyboard layout: the page's selector (automatic, or the person's choice); a new one
// while connected connects again to the same session with it.
layoutSelector(document.getElementById("keyboard"), t, () => {
  if (ui !== null && root.dataset.desktopState === "connected") {
    relayout = true;
    ui.shutdown();
  }
}).catch(() => {});

// Load the client while the user types the password (data-client="ready" once it is).
loadClient()
  .then(() => {
    root.dataset.client = "ready";
    if (signOn) form.requestSubmit(); // nothing to ask: open the desktop at once
  })
  .catch((error) => show("error", t("desktop_client_failed", { message: describe(error) })));

// The portal session kept fresh while the desktop is open: the broker refreshes it when its
// access token is due, and a refresh the provider refuses ends the session (and, in every
// replica, this desktop's relay) instead of it lasting until the cookie's own end.
setInterval(() => {
  fetch("/auth/session", { credentials: "same-origin", cache: "no-store" }).catch(() => {});
}, 60_000);
