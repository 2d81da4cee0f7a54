"""The portal: the broker's pages for people in a browser. ``signin`` signs them in with
OpenID Connect (authorization code flow with PKCE) and keeps the session in an encrypted,
authenticated cookie (``cookies``) that any replica with the same secret reads; the /v1 API
takes that cookie as well as a bearer token, with a CSRF check on every call that changes
something."""
