-- Argo CD resource actions for a SessionHost: drain (no new sessions; users with a session
-- may still reconnect) and undrain. Only the one that changes something is enabled.
local actions = {}
local draining = obj.spec ~= nil and obj.spec.drainMode == true
actions["drain"] = {
  ["disabled"] = draining,
  ["iconClass"] = "fa fa-fw fa-pause-circle",
  ["displayName"] = "Drain (no new sessions)"
}
actions["undrain"] = {
  ["disabled"] = not draining,
  ["iconClass"] = "fa fa-fw fa-play-circle",
  ["displayName"] = "Undrain (take new sessions)"
}
return actions
