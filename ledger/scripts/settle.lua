-- settle: ARGV[base+1] id, [base+2] known (0 or 1), [base+3] tokens (>= 0).
-- Returns {1, charged, estimate} for a live reservation; {1, overage, estimate, 1} for one
-- whose lease ran out (the sweep charged its estimate) settled for the first time with usage
-- above that estimate: only the overage is charged; {0} otherwise (settled before, expired with
-- usage at most its estimate, or never seen: then a tombstone refuses a later reserve of the id).
local id = ARGV[base + 1]

-- Fast path of the usual layout (one width, one window): the totals are current and the
-- reservation is live — current's tests and otherwidths (below), written out. It reads the
-- fields state(id, 'M', true) reads, in its order (ARGV[4] width_ms, ARGV[7] window_ms), so the
-- general path below reuses the read; it writes what the fast path of every other layout
-- writes. A charge while now's bucket is newer than the pending one (pending: unpend, below)
-- goes on to that fast path, which makes it from the same read (live: the '#' it computed).
local r1, live
if nwd == 1 and nwin == 1 then
  local w, ws = ARGV[4], ARGV[7]
  local tf, bf = 't' .. ws, 'b' .. w
  r1 = redis.call('HMGET', A, '#', 'e', 'v', 'h' .. w, tf, 'l' .. ws, bf, id, 'M')
  local v, e, h, tw, l, M = r1[8], r1[2], r1[4], r1[5], r1[6], r1[9]
  if v and r1[3] == ARGV[2] and e and h and tw and l and not (M and string.find(M, ',', 1, true)) then
    local wn, win = w + 0, ws + 0
    local cur, hn = floor(now / wn), h + 0
    if e + 0 > now and hn <= cur and l + 0 == floor((now - win) / wn) then
      local est = string.sub(v, 1, string.find(v, ' ', 1, true) - 1) -- estof(v)
      local charged = est
      if ARGV[base + 2] == '1' then
        charged = ARGV[base + 3]
      end
      local c, ee = charged + 0, est + 0
      local held = format('%d', (r1[1] or 0) - ee)
      if c ~= 0 and cur > hn then
        live = held -- '#' for the other layouts' fast path, which writes it
      else
        redis.call('HDEL', A, id)
        if c == 0 then
          redis.call('HSET', A, '#', held)
        else
          local nb = (r1[7] or 0) + c
          if nb > MAXT then
            nb = MAXT
          end
          redis.call('HSET', A, '#', held, bf, format('%d', nb), tf, format('%d', tw + c))
        end
        return { 1, c, ee }
      end
    end
  end
end

-- @state

local r = state(id, 'M', true, r1)

-- unpend adds a width's pending tokens b (a string, or false) to their bucket h (its index, a
-- string) in the width's hash key, saturating, when now's bucket is newer than h (the fast
-- paths below). A new bucket (counts are positive) renews the hash's TTL. An existing bucket
-- was created under a TTL that covers it (a flush at a time >= its start, or a rebuild that
-- renewed every hash), and no other quota has written since ('v').
local function unpend(key, h, b)
  if b and b ~= '0' then
    local n = redis.pcall('HINCRBY', key, h, b)
    if type(n) ~= 'number' or n > MAXT then
      redis.call('HSET', key, h, idx(MAXT))
    elseif n == b + 0 then
      extend(key, ARGV[1])
    end
  end
end

-- Fast path of every other layout: the totals are current and the reservation is live. Charge
-- the bucket of now of every width (pending in KEYS[1], see common.lua) and every window's total
-- (each window's watermark is its low end, at or before now's bucket): one write to KEYS[1].
local est = estof(r[rx])

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

if (not r1 or live) and est and not otherwidths and current(r) then
  redis.call('HDEL', A, id)
  local charged = est
  if ARGV[base + 2] == '1' then
    charged = ARGV[base + 3]
  end
  local c, e = charged + 0, est + 0
  local f = { '#', live or idx((r[1] or 0) - e) }
  if c ~= 0 then
    for i = 1, nwd do
      local cur, h, b = wcur[i], r[3 + i] + 0, r[ob + i]
      if cur > h then
        -- Now's bucket is newer than the pending one: the pending tokens go to their bucket in
        -- the width's hash (every window still counts it: no watermark moved since it was
        -- charged, since only the general path moves them, and it flushes first).
        unpend(KEYS[1 + i], r[3 + i], b)
        f[#f + 1], f[#f + 2] = names[3 + i], idx(cur)
        f[#f + 1], f[#f + 2] = names[ob + i], idx(math.min(c, MAXT))
      else
        f[#f + 1], f[#f + 2] = names[ob + i], idx(math.min((b or 0) + c, MAXT))
      end
    end
    local o = 3 + nwd
    for j = 1, nwin do
      f[#f + 1], f[#f + 2] = names[o + 2 * j - 1], idx(r[o + 2 * j - 1] + c)
    end
  end
  -- KEYS[1] keeps its TTL: it held this reservation, so it lives as long as its lease and the
  -- pending bucket need.
  redis.call('HSET', A, unpack(f))
  return { 1, c, e }
end

-- @common

local swept
est, swept = prepare(r, id)
if not est then
  local tomb = (gone and gone[id]) or tombof(tombstone(r))
  local over = 0
  if tomb == nil then
    entomb({ id, '-' })
  elseif tomb ~= '-' then
    -- expired, charged its estimate: charge what the usage exceeds it by, and only once
    if ARGV[base + 2] == '1' then
      over = math.max(0, tonumber(ARGV[base + 3]) - tonumber(tomb))
    end
    local exp = string.match(r[rt] or '', ':(%d+)$') or idx(now + tonumber(ttl))
    redis.call('HSET', A, '~' .. id, '-:' .. exp)
    if over > 0 then
      for _, wd in ipairs(widths) do
        charge(wd, wd.cur, over)
      end
      chargeforeign(now, over)
      commit(true, false)
      return { 1, over, tonumber(tomb), 1 }
    end
  end
  commit(swept, false)
  return { 0 }
end
redis.call('HDEL', A, id)
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
commit(true, false)
return { 1, tonumber(charged), tonumber(est) }
