-- Drain the host: spec.drainMode true. Sessions on it go on, their users may reconnect;
-- the operator places no new session on it.
if obj.spec == nil then
  obj.spec = {}
end
obj.spec.drainMode = true
return obj
