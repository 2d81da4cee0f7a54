-- Argo CD health check for hostpool.io/v1alpha1 SessionHost (hostpool-operator).
-- Healthy: condition Available is True, or False for a reason that is normal operation:
--   SessionLimitReached (the host is full) or LogonStormThreshold (it waits out a logon storm).
-- Suspended: Available False because of Draining: drain mode is set on purpose and stops new
--   sessions until it is cleared (like a paused Deployment).
-- Degraded: Available False for any other reason (InvalidSpec, PoolNotFound, PoolInvalid).
-- Progressing: the operator has not observed this generation yet, or Available is
--   missing/Unknown.
-- Stale metrics (condition MetricsStale True) are named in the message.
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
  hs.message = "Waiting for the hostpool-operator to observe the host"
  return hs
end
if generation ~= nil and observed < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the hostpool-operator to observe generation " .. generation ..
    " (observed " .. observed .. ")"
  return hs
end

local available = condition(status, "Available")
if available == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for condition Available"
  return hs
end

local message = describe(available)
local stale = condition(status, "MetricsStale")
if stale ~= nil and stale.status == "True" then
  message = message .. "; metrics stale: " .. describe(stale)
end

if available.status == "True" then
  hs.status = "Healthy"
elseif available.status == "False" then
  if available.reason == "SessionLimitReached" or available.reason == "LogonStormThreshold" then
    hs.status = "Healthy"
  elseif available.reason == "Draining" then
    hs.status = "Suspended"
  else
    hs.status = "Degraded"
  end
else
  hs.status = "Progressing"
  message = "Available is " .. tostring(available.status) .. ": " .. message
end
hs.message = message
return hs
