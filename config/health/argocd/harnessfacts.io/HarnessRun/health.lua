-- Argo CD health of a HarnessRun: Progressing until the run is Finished,
-- then Healthy when its verdict is Pass and Degraded otherwise (a failed
-- check, an agent or infrastructure failure, a cancel).
local hs = { status = "Progressing", message = "waiting for the run to start" }
if obj.status == nil then
  return hs
end
if obj.status.phase ~= nil then
  hs.message = "phase " .. obj.status.phase
end
if obj.status.conditions ~= nil then
  for _, c in ipairs(obj.status.conditions) do
    if c.type == "Finished" and c.status == "True" then
      if c.reason == "Pass" then
        hs.status = "Healthy"
      else
        hs.status = "Degraded"
      end
      hs.message = c.reason
      if c.message ~= nil and c.message ~= "" then
        hs.message = c.reason .. ": " .. c.message
      end
      return hs
    end
  end
end
return hs
