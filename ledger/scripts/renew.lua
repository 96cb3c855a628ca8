-- renew: ARGV[base+1] id, [base+2] lease_ms. Returns {1, deadline_ms} or {0}.
local id = ARGV[base + 1]
local lease = tonumber(ARGV[base + 2])
local swept = sweep()
if not redis.call('ZSCORE', KEYS[2], id) then
  if swept then
    touch()
  end
  return { 0 }
end
redis.call('ZADD', KEYS[2], 'XX', idx(now + lease), id)
touch()
return { 1, now + lease }
