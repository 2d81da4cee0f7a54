"""The broker's pages for people in a browser: the portal page (``portal``: the signed-in
user's pools, live) and the desktop page (``desktop``: one session in the browser), in the
language the browser asks for (``i18n``). Both need the portal's cookie session (the
broker's ``signin``); both are made with the broker's one renderer (``render``)."""
