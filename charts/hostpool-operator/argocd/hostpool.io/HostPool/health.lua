-- Argo CD health check for hostpool.io/v1alpha1 HostPool (hostpool-operator).
-- Healthy: condition Ready is True and status.observedGeneration is the current generation.
-- Progressing: the operator has not observed this generation yet, or Ready is missing/Unknown.
-- Degraded: Ready is False (the spec is invalid), or the image update failed (UpdateFailed).
-- Progressing also: an image update runs (Updating is True), with its hosts in the message.
-- Saturation and the scaling limit do not change the status; they are named in the message.
local hs = {}

local function condition(status, type_)
  if status == nil or status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == type_ then
      return c
    end
  end
  return nil
end

local function describe(c)
  local text = c.reason or ""
  if c.message ~= nil and c.message ~= "" then
    if text ~= "" then
      text = text .. ": "
    end
    text = text .. c.message
  end
  return text
end

local status = obj.status
local generation = obj.metadata and obj.metadata.generation
local observed = status and status.observedGeneration

if status == nil or observed == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the hostpool-operator to observe the pool"
  return hs
end
if generation ~= nil and observed < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the hostpool-operator to observe generation " .. generation ..
    " (observed " .. observed .. ")"
  return hs
end

local ready = condition(status, "Ready")
if ready == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for condition Ready"
  return hs
end
if ready.status == "False" then
  hs.status = "Degraded"
  hs.message = describe(ready)
  return hs
end
if ready.status ~= "True" then
  hs.status = "Progressing"
  hs.message = "Ready is " .. tostring(ready.status) .. ": " .. describe(ready)
  return hs
end

local failed = condition(status, "UpdateFailed")
if failed ~= nil and failed.status == "True" then
  hs.status = "Degraded"
  hs.message = "image update failed: " .. describe(failed)
  return hs
end
local updating = condition(status, "Updating")
if updating ~= nil and updating.status == "True" then
  hs.status = "Progressing"
  local update = status.update or {}
  hs.message = "image update " .. (updating.reason or "") .. ": " ..
    tostring(update.updatedHosts or 0) .. " updated, " ..
    tostring(update.outdatedHosts or 0) .. " outdated; " .. (updating.message or "")
  return hs
end

hs.status = "Healthy"
local message = describe(ready)
local saturated = condition(status, "Saturated")
if saturated ~= nil and saturated.status == "True" then
  message = message .. "; saturated: " .. describe(saturated)
end
local limited = condition(status, "ScalingLimited")
if limited ~= nil and limited.status == "True" then
  message = message .. "; scaling limited: " .. describe(limited)
end
hs.message = message
return hs
