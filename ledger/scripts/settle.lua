-- settle: ARGV[base+1] id, [base+2] known (0 or 1), [base+3] tokens (>= 0).
-- Returns {1, charged, estimate} or {0} when the reservation is not live (settled before,
-- expired and charged at its estimate, or never existed).
local id = ARGV[base + 1]
local swept = sweep()
local est = redis.call('HGET', KEYS[1], id)
if not est then
  if swept then
    touch()
  end
  return { 0 }
end
redis.call('HDEL', KEYS[1], id)
redis.call('ZREM', KEYS[2], id)
redis.call('HINCRBY', KEYS[1], '#', idx(-tonumber(est)))
local charged = est
if ARGV[base + 2] == '1' then
  charged = ARGV[base + 3]
end
if tonumber(charged) ~= 0 then
  for _, w in ipairs(widths) do
    redis.call('HINCRBY', w.key, idx(fdiv(now, w.w)), charged)
  end
end
prune()
touch()
return { 1, tonumber(charged), tonumber(est) }
