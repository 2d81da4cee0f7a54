// The desktop page: the user's session of one pool in the browser. It makes sure the user
// has a placed session (POST connect, waiting as told), takes a one-use ticket, and connects
// IronRDP's web component through the broker's relay (RDCleanPath over a WebSocket). The
// page root's data-desktop-state is idle, connecting, connected, closed or error.

const root = document.getElementById("desktop");
const form = document.getElementById("logon");
const password = document.getElementById("password");
const statusLine = document.getElementById("status");
const screen = document.getElementById("screen");
const disconnectButton = document.querySelector('[data-action="disconnect"]');
const csrf = document.querySelector('meta[name="hostpool-csrf"]').content;
const { namespace, pool, user, rdpModule, componentModule } = root.dataset;
const base = `/v1/namespaces/${encodeURIComponent(namespace)}/pools/${encodeURIComponent(pool)}`;
// The page's strings in its language (the server chose it from Accept-Language).
const text = JSON.parse(document.getElementById("hostpool-strings").textContent);

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

async function post(path, body) {
  return fetch(base + path, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", Accept: "application/json", "X-Hostpool-CSRF": csrf },
    body: JSON.stringify(body ?? {}),
  });
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
    if (response.status !== 202) throw await failure(response);
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

function desktopSize() {
  const box = screen.getBoundingClientRect();
  const width = Math.max(640, Math.min(3840, Math.floor(box.width / 2) * 2));
  const height = Math.max(480, Math.min(2160, Math.floor(box.height / 2) * 2));
  return { width, height };
}

function describe(error) {
  if (error && typeof error.kind === "function") {
    const kinds = ["error", "password", "logon", "denied", "relay_refused", "relay_unreachable", "negotiation"];
    return t("desktop_failed", { kind: t(`desktop_kind_${kinds[error.kind()] ?? "error"}`) });
  }
  return String((error && error.message) || error);
}

async function connect(secret) {
  const clicked = performance.now();
  form.hidden = true;
  show("connecting", t("desktop_connecting"));
  await placed();
  const ticketAnswer = await post("/session/web-ticket");
  if (!ticketAnswer.ok) throw await failure(ticketAnswer);
  const ticket = await ticketAnswer.json();
  const rdp = await loadClient();
  const { element, ready } = component(rdp);
  ui = await ready;
  const relay = new URL(`${base}/session/web`, window.location.href);
  relay.protocol = relay.protocol === "https:" ? "wss:" : "ws:";
  const config = ui
    .configBuilder()
    .withUsername(user)
    .withPassword(secret)
    .withDestination(ticket.destination)
    .withProxyAddress(relay.href)
    .withAuthToken(ticket.ticket)
    .withServerDomain("")
    .withExtension(rdp.enableCredssp(false)) // xrdp 0.9 has no NLA: TLS, then the Client Info PDU
    .withDesktopSize(desktopSize())
    .build();
  const session = await ui.connect(config);
  ui.setVisibility(true);
  disconnectButton.hidden = false;
  show("connected", t("desktop_connected"));
  firstFrame(element).then(() => {
    root.dataset.firstFrameMs = String(Math.round(performance.now() - clicked));
    post("/session/web/first-frame", { ms: Math.round(performance.now() - clicked) }).catch(() => {});
  });
  try {
    await session.run();
    show("closed", t("desktop_disconnected"));
  } finally {
    ui = null;
    disconnectButton.hidden = true;
    form.hidden = false;
  }
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
  connect(secret).catch((error) => {
    form.hidden = false;
    disconnectButton.hidden = true;
    show("error", describe(error));
  });
});

disconnectButton.addEventListener("click", () => {
  if (ui !== null) ui.shutdown();
});

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
