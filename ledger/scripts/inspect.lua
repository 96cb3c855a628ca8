-- inspect: ARGV[base+1] nbudgets, then per budget: window_ms, width slot.
-- Returns {active reservations, reserved tokens, settled_1, settled_2, ...}.
local nb = tonumber(ARGV[base + 1])
if sweep() then
  touch()
end
local buckets = prune()
local out = { redis.call('ZCARD', KEYS[2]), reserved_tokens() }
for i = 1, nb do
  local o = base + 1 + 2 * (i - 1)
  local slot = tonumber(ARGV[o + 2])
  out[#out + 1] = window_settled(buckets[slot], tonumber(ARGV[o + 1]), widths[slot].w)
end
return out
