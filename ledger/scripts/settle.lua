-- settle: ARGV[base+1] id, [base+2] known (0 or 1), [base+3] tokens (>= 0).
-- Returns {1, charged, estimate} for a live reservation; {1, overage, estimate, 1} for one
-- whose lease ran out (the sweep charged its estimate) settled for the first time with usage
-- above that estimate: only the overage is charged; {0} otherwise (settled before, expired with
-- usage at most its estimate, or never seen: then a tombstone refuses a later reserve of the id).
local id = ARGV[base + 1]
local r = state(id)

-- Fast path: the totals are current and the reservation is live. Charge the bucket of now in
-- every width hash and every window's total (each window's watermark is its low end, at or
-- before now's bucket).
local est = r[4 + nwd + 2 * nwin]

-- foreignwidths reports whether another policy for this rule declared a bucket width this
-- quota lacks ('M', see common.lua): then the charge must go there too, on the general path.
local function foreignwidths()
  local M = redis.call('HGET', A, 'M')
  if not M then
    return false
  end
  for w in string.gmatch(M, '(%d+):') do
    local own = false
    for i = 1, nwd do
      own = own or ARGV[2 + 2 * i] == w
    end
    if not own then
      return true
    end
  end
  return false
end

if est and current(r) and not foreignwidths() then
  redis.call('HDEL', A, id)
  redis.call('ZREM', D, id)
  local charged = est
  if ARGV[base + 2] == '1' then
    charged = ARGV[base + 3]
  end
  local c = tonumber(charged)
  local f = { '#', idx(tonumber(r[1] or '0') - tonumber(est)) }
  if c ~= 0 then
    for i = 1, nwd do
      local cur = floor(now / tonumber(ARGV[2 + 2 * i]))
      if tonumber(redis.call('HINCRBY', KEYS[2 + i], idx(cur), charged)) == c then
        -- A new bucket (counts are positive): renew the hash's TTL. An existing bucket b was
        -- created at a time >= b * width under a TTL >= width + longest window, or existed
        -- when the totals became this quota's (a rebuild renewed every hash's TTL) and no
        -- other quota has written since ('v'), so its TTL already covers this charge.
        extend(KEYS[2 + i], ARGV[1])
      end
      if cur > tonumber(r[3 + i]) then
        f[#f + 1] = 'h' .. ARGV[2 + 2 * i]
        f[#f + 1] = idx(cur)
      end
    end
    for j = 1, nwin do
      f[#f + 1] = 't' .. ARGV[wbase - 1 + 2 * j]
      f[#f + 1] = idx(tonumber(r[3 + nwd + 2 * j - 1]) + c)
    end
  end
  -- KEYS[1] keeps its TTL: it held this reservation, so it lives as long as its lease needs.
  redis.call('HSET', A, unpack(f))
  return { 1, c, tonumber(est) }
end

-- @common

local swept
est, swept = prepare(r, id)
if not est then
  local tomb = (gone and gone[id]) or tombof(r[5 + nwd + 2 * nwin])
  local over = 0
  if tomb == nil then
    entomb({ id, '-' })
  elseif tomb ~= '-' then
    -- expired, charged its estimate: charge what the usage exceeds it by, and only once
    if ARGV[base + 2] == '1' then
      over = math.max(0, tonumber(ARGV[base + 3]) - tonumber(tomb))
    end
    local exp = string.match(r[5 + nwd + 2 * nwin] or '', ':(%d+)$') or idx(now + tonumber(ttl))
    redis.call('HSET', A, '~' .. id, '-:' .. exp)
    if over > 0 then
      for _, wd in ipairs(widths) do
        charge(wd, wd.cur, over)
      end
      chargeforeign(now, over)
      commit(true, false, false)
      return { 1, over, tonumber(tomb), 1 }
    end
  end
  commit(swept, false, false)
  return { 0 }
end
redis.call('HDEL', A, id)
redis.call('ZREM', D, id)
reserved, rdirty = reserved - tonumber(est), true
local charged = est
if ARGV[base + 2] == '1' then
  charged = ARGV[base + 3]
end
if tonumber(charged) ~= 0 then
  for _, wd in ipairs(widths) do
    charge(wd, wd.cur, charged)
  end
  chargeforeign(now, charged)
end
-- KEYS[1] keeps its TTL: it held this reservation, so it lives as long as its lease needs.
commit(true, false, false)
return { 1, tonumber(charged), tonumber(est) }
