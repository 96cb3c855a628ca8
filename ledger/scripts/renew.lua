-- renew: ARGV[base+1] id, [base+2] lease_ms. Returns {1, deadline_ms} or {0}.
-- A later deadline leaves 'e' a lower bound, so only the deadline itself is written.
local id = ARGV[base + 1]
local lease = tonumber(ARGV[base + 2])
local r = state(id)

-- @common

local est, swept = prepare(r, id)
if not est then
  commit(swept, false, false)
  return { 0 }
end
redis.call('ZADD', D, 'XX', idx(now + lease), id)
commit(true, true, true)
return { 1, now + lease }
