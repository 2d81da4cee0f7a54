// The desktop's keyboard layout: the browser's, sent at connect (the relay writes it into the
// RDP Client Core Data's keyboardLayout, which xrdp maps to the session's XKB layout), so a
// Swedish, Turkish or Spanish keyboard types its own characters. Keys go as scancodes (the
// physical key): the session's layout turns them into characters, as on a local keyboard.
//
// Which layout: the person's choice in the page's selector (remembered in localStorage), else
// "automatic": what the browser's keyboard map says (navigator.keyboard, Chromium), else the
// browser's language, else US English.

// Input locale identifiers (hex, as the relay's keyboardLayout takes them) and their names,
// each in its own language; the layouts xrdp's keyboard map knows.
export const LAYOUTS = [
  ["0409", "English (US)"],
  ["0809", "English (UK)"],
  ["041D", "Svenska"],
  ["040B", "Suomi"],
  ["0414", "Norsk"],
  ["0406", "Dansk"],
  ["0407", "Deutsch"],
  ["0807", "Deutsch (Schweiz)"],
  ["040C", "Français"],
  ["040A", "Español"],
  ["080A", "Español (Latinoamérica)"],
  ["041F", "Türkçe Q"],
  ["0410", "Italiano"],
  ["0816", "Português"],
  ["0416", "Português (Brasil)"],
  ["0415", "Polski"],
  ["0419", "Русский"],
  ["0412", "한국어"],
  ["0411", "日本語"],
];

const STORE = "hostpool.keyboardLayout";
const AUTO = "auto";
// The choice made on this page (where storage is refused, it holds for the page only).
let choiceHere = null;

// The layout the browser's language suggests (the first language that names one).
const BY_LANGUAGE = {
  "en-gb": "0809", en: "0409", sv: "041D", fi: "040B", nb: "0414", nn: "0414", no: "0414",
  da: "0406", "de-ch": "0807", de: "0407", fr: "040C", "es-es": "040A", es: "080A",
  tr: "041F", it: "0410", "pt-br": "0416", pt: "0816", pl: "0415", ru: "0419", ko: "0412",
  ja: "0411", zh: "0409",
};

function fromLanguages(languages) {
  for (const language of languages || []) {
    const lower = String(language).toLowerCase();
    const found = BY_LANGUAGE[lower] ?? BY_LANGUAGE[lower.split("-")[0]];
    if (found) return found;
  }
  return null;
}

// The layout a keyboard map (KeyboardEvent.code -> the key's character) is, by the keys that
// tell the layouts apart; null when it is none of them.
function fromMap(map) {
  const key = (code) => map.get(code);
  if (key("KeyQ") === "a") return "040C"; // AZERTY
  if (key("BracketLeft") === "ğ") return "041F";
  if (key("BracketLeft") === "å") {
    if (key("Semicolon") === "ø") return "0414";
    if (key("Semicolon") === "æ") return "0406";
    if (key("Semicolon") === "ö") return fromLanguages(navigator.languages) === "040B" ? "040B" : "041D";
  }
  if (key("KeyY") === "z") return key("BracketLeft") === "è" ? "0807" : "0407"; // QWERTZ
  if (key("Semicolon") === "ñ") return fromLanguages(navigator.languages) === "080A" ? "080A" : "040A";
  if (key("Semicolon") === "ò") return "0410";
  if (key("Semicolon") === "ç") return fromLanguages(navigator.languages) === "0416" ? "0416" : "0816";
  if (key("KeyQ") === "й") return "0419";
  if (key("KeyQ") === "q" && key("Semicolon") === ";") return key("Backslash") === "#" ? "0809" : "0409";
  return null;
}

// The browser's own layout: its keyboard map where it gives one, else its language.
export async function detectedLayout() {
  try {
    if (navigator.keyboard && typeof navigator.keyboard.getLayoutMap === "function") {
      const found = fromMap(await navigator.keyboard.getLayoutMap());
      if (found) return found;
    }
  } catch (_) {
    // not offered here (another browser, not a secure context): the language tells
  }
  return fromLanguages(navigator.languages) ?? "0409";
}

function stored() {
  try {
    const value = choiceHere ?? window.localStorage.getItem(STORE);
    return LAYOUTS.some(([id]) => id === value) ? value : AUTO;
  } catch (_) {
    return AUTO;
  }
}

// The layout to send at connect (hex).
export async function chosenLayout() {
  const choice = stored();
  return choice === AUTO ? detectedLayout() : choice;
}

// Fills the selector (Automatic, naming what it found, then the layouts), shows the stored
// choice and remembers a new one; onChange(layout) after a change.
export async function layoutSelector(select, t, onChange) {
  const detected = await detectedLayout();
  const name = (id) => (LAYOUTS.find(([each]) => each === id) || [id, id])[1];
  const options = [[AUTO, t("desktop_keyboard_auto", { layout: name(detected) })], ...LAYOUTS];
  select.replaceChildren(
    ...options.map(([value, label]) => {
      const option = document.createElement("option");
      option.value = value;
      option.textContent = label;
      return option;
    }),
  );
  select.value = stored();
  select.addEventListener("change", () => {
    choiceHere = select.value;
    try {
      window.localStorage.setItem(STORE, select.value);
    } catch (_) {
      // storage refused: the choice holds for this page only
    }
    select.blur(); // the keys go to the desktop again
    chosenLayout().then(onChange);
  });
}
