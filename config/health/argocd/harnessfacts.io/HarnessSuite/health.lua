-- Argo CD health of a HarnessSuite, after kstatus' conventions: Degraded
-- while Stalled (missing fixtures, runs refused), Suspended while
-- spec.suspend is true, Progressing while the round runs or the status is
-- older than the spec, Healthy once the round is complete.
local hs = { status = "Progressing", message = "waiting for the controller" }
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
if obj.status.observedGeneration == nil or obj.status.observedGeneration < obj.metadata.generation then
  hs.message = "the controller has not seen the latest spec yet"
  return hs
end
local conds = {}
for _, c in ipairs(obj.status.conditions) do
  conds[c.type] = c
end
if conds.Stalled ~= nil and conds.Stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = conds.Stalled.message
  return hs
end
if conds.Suspended ~= nil and conds.Suspended.status == "True" then
  hs.status = "Suspended"
  hs.message = conds.Suspended.message
  return hs
end
if conds.Complete ~= nil and conds.Complete.status == "True" then
  hs.status = "Healthy"
  hs.message = conds.Complete.message
  return hs
end
if conds.Reconciling ~= nil then
  hs.message = conds.Reconciling.message
end
return hs
