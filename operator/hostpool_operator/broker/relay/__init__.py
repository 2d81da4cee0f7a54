"""The desktop relay: the browser's RDP client (IronRDP's web client) reaches the caller's
own placed host through the broker. ``routes`` checks the call and the one-use ticket and
serves the web client's files (``client_files``); ``host`` opens the link to the host;
``pump`` carries the traffic both ways, watching the browser's signs of life (``liveness``);
``rdcleanpath`` is the wire codec of the relay's first message and of the Client Info PDU."""
