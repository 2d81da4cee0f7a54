"""The only code that talks to the Kubernetes API: the client and its login, informers,
Events, write slots, and the sinks the client reports into."""
