-- Argo CD health check for hostpool.io/v1alpha1 SessionRequest (hostpool-operator).
-- Healthy: phase Assigned (the message names the host).
-- Progressing: no status yet, or phase Pending (the message says why it waits).
-- Degraded: phase Failed (its host was deleted, or the request is invalid).
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

local status = obj.status
local phase = status and status.phase

if phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the hostpool-operator to place the request"
  return hs
end

local assigned = condition(status, "Assigned")
local reason = status.reason or (assigned and assigned.reason) or ""
local detail = status.message or (assigned and assigned.message) or ""

if phase == "Assigned" then
  hs.status = "Healthy"
  local message = "Assigned to " .. tostring(status.host)
  if reason ~= "" then
    message = message .. " (" .. reason .. ")"
  end
  if status.sessionState ~= nil then
    message = message .. ", session " .. status.sessionState
  end
  hs.message = message
elseif phase == "Pending" then
  hs.status = "Progressing"
  local message = "Pending"
  if reason ~= "" then
    message = message .. ": " .. reason
  end
  if detail ~= "" then
    message = message .. ": " .. detail
  end
  hs.message = message
elseif phase == "Failed" then
  hs.status = "Degraded"
  local message = "Failed"
  local why = (assigned and assigned.reason) or status.reason or ""
  if why ~= "" then
    message = message .. ": " .. why
  end
  if detail ~= "" then
    message = message .. ": " .. detail
  end
  hs.message = message
else
  hs.status = "Unknown"
  hs.message = "Unknown phase " .. tostring(phase)
end
return hs
