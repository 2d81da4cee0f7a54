-- Argo CD health check for hostpool.io/v1alpha1 ScalingPlan (hostpool-operator).
-- Healthy: condition Ready is True (Applied) and status.observedGeneration is the current
--   generation; the phase in force (status.phase) is named in the message.
-- Progressing: the operator has not observed this generation yet, or Ready is missing/Unknown.
-- Degraded: Ready is False: InvalidSpec, UnknownTimeZone, PoolNotFound, PoolConflict,
--   ScalingRequired or WritesFailed (the message lists every problem, the reason is the first
--   one's).
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
  hs.message = "Waiting for the hostpool-operator to observe the plan"
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

hs.status = "Healthy"
local message = describe(ready)
if status.phase ~= nil and status.phase ~= "" then
  message = message .. "; phase " .. tostring(status.phase)
end
hs.message = message
return hs
