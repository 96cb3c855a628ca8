-- renew: ARGV[base+1] id, [base+2] lease_ms. Returns {1, deadline_ms} or {0}.
local id = ARGV[base + 1]
local lease = tonumber(ARGV[base + 2])

-- @state

local r = state(id)

-- @common

local est, swept = prepare(r, id)
if not est then
  commit(swept, false)
  return { 0 }
end
-- Only the deadline changes; an earlier one than 'e' (a policy with a shorter lease) moves 'e'.
local dl = now + lease
if earliest == nil or dl < earliest then
  earliest, edirty = dl, true
end
commit(true, true, { id, est .. ' ' .. idx(dl) })
return { 1, now + lease }
