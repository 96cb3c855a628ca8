-- settle: ARGV[base+1] id, [base+2] known (0 or 1), [base+3] tokens (>= 0).
-- Returns {1, charged, estimate} for a live reservation; {1, overage, estimate, 1} for one
-- whose lease ran out (the sweep charged its estimate) settled for the first time with usage
-- above that estimate: only the overage is charged; {0} otherwise (settled before, expired with
-- usage at most its estimate, or never seen: then a tombstone refuses a later reserve of the id).
local id = ARGV[base + 1]
local r = state(id, 'M')

-- Fast path: the totals are current and the reservation is live. Charge the bucket of now in
-- every width hash and every window's total (each window's watermark is its low end, at or
-- before now's bucket).
local est = r[rm - 2]

-- otherwidths: another policy for this rule declared a bucket width this quota lacks ('M', see
-- common.lua): then the charge must go there too, on the general path. With the totals this
-- quota's ('v'), 'M' lists every width of this quota (the call that made them so wrote both),
-- so it names another width exactly when it lists more than nwd.
local otherwidths = false
if r[rm] then
  local n, at = 1, string.find(r[rm], ',', 1, true)
  while at do
    n = n + 1
    at = string.find(r[rm], ',', at + 1, true)
  end
  otherwidths = n > nwd
end

if est and not otherwidths and current(r) then
  redis.call('HDEL', A, id)
  redis.call('ZREM', D, id)
  local charged = est
  if ARGV[base + 2] == '1' then
    charged = ARGV[base + 3]
  end
  local c, e = tonumber(charged), tonumber(est)
  local held = tonumber(r[1] or '0') - e
  local f = { '#', idx(held) }
  if held <= 0 then
    f[3], f[4] = 'xd', '0' -- KEYS[2] held only this reservation: it is gone (see the head)
  end
  if c ~= 0 then
    for i = 1, nwd do
      local cur = wcur[i]
      local b = idx(cur)
      if redis.call('HINCRBY', KEYS[2 + i], b, charged) == c then
        -- A new bucket (counts are positive): renew the hash's TTL. An existing bucket b was
        -- created at a time >= b * width under a TTL >= width + longest window, or existed
        -- when the totals became this quota's (a rebuild renewed every hash's TTL) and no
        -- other quota has written since ('v'), so its TTL already covers this charge.
        extend(KEYS[2 + i], ARGV[1])
      end
      if cur > tonumber(r[3 + i]) then
        f[#f + 1], f[#f + 2] = names[3 + i], b
      end
    end
    local o = 3 + nwd
    for j = 1, nwin do
      f[#f + 1], f[#f + 2] = names[o + 2 * j - 1], idx(tonumber(r[o + 2 * j - 1]) + c)
    end
  end
  -- KEYS[1] keeps its TTL: it held this reservation, so it lives as long as its lease needs.
  redis.call('HSET', A, unpack(f))
  return { 1, c, e }
end

-- @common

local swept
est, swept = prepare(r, id)
if not est then
  local tomb = (gone and gone[id]) or tombof(r[rm - 1])
  local over = 0
  if tomb == nil then
    entomb({ id, '-' })
  elseif tomb ~= '-' then
    -- expired, charged its estimate: charge what the usage exceeds it by, and only once
    if ARGV[base + 2] == '1' then
      over = math.max(0, tonumber(ARGV[base + 3]) - tonumber(tomb))
    end
    local exp = string.match(r[rm - 1] or '', ':(%d+)$') or idx(now + tonumber(ttl))
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
