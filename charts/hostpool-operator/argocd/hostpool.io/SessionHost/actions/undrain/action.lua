-- Undrain the host: spec.drainMode false, it takes new sessions again.
if obj.spec == nil then
  obj.spec = {}
end
obj.spec.drainMode = false
return obj
