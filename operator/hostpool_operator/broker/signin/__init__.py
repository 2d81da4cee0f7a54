"""Sign-in to the portal: OpenID Connect's authorization code flow with PKCE (``flow``), the
session in an encrypted, authenticated cookie that any replica with the same secret reads
(``cookies``), and the rules for the URLs a browser is sent to (``urls``). The /v1 API takes
that cookie as well as a bearer token, with a CSRF check on every call that changes
something (the broker's ``gate``)."""
