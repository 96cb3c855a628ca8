-- reserve: ARGV[base+1] estimate, [base+2] lease_ms, [base+3] id, [base+4] nbudgets, then per
-- budget: window slot (1-based index into the windows), capacity.
-- Returns {admitted, refusing budget (1-based, 0 when admitted), retry_after_ms,
--          remaining_1, reset_ms_1, remaining_2, reset_ms_2, ...}.
-- Idempotent by id: a retry of a call whose reply was lost finds its reservation live and
-- reports it admitted again without holding the estimate twice.
-- Returns {-1} for an id with a tombstone (common.lua): its reservation already ended, or it
-- was released before this call ran (a timed-out reserve overtaken by its release). Nothing is
-- held.
local est = tonumber(ARGV[base + 1])
local lease = tonumber(ARGV[base + 2])
local id = ARGV[base + 3]
local nb = tonumber(ARGV[base + 4])
local r = state(id, 'xa', 'xd')

-- Fast path: the totals are current and the id is new. Admit when the estimate fits every
-- window; a denial (which needs the buckets for its retry-after) takes the general path.
-- The fast path renews a TTL only when it could run out within ttl: KEYS[1]'s 'xa' and 'xd'
-- are lower bounds of the expiry of KEYS[1] and KEYS[2] (store clock, ms). A renewal sets the
-- TTL to ttl plus a slack (an eighth of ttl, at most a minute) and records the new bound, so a
-- key in steady use gets one PEXPIRE per slack instead of one per call, and lives at least ttl
-- after every write (at most ttl plus the slack). 'xa' lives in the hash it describes: it goes
-- when the hash goes. KEYS[2] is deleted when its last reservation leaves ('#' drops to 0, and
-- every call that does so writes 'xd' 0), so 'xd' only counts while '#' > 0.
local e = current(r)
if e and not r[rm - 2] and not r[rm - 1] then
  local before = tonumber(r[1] or '0')
  local held = before + est
  local o = 3 + nwd
  local out = { 1, 0, 0 }
  for i = 1, nb do
    local j = 1
    if nwin > 1 then
      j = tonumber(ARGV[base + 3 + 2 * i])
    end
    local remaining = tonumber(ARGV[base + 4 + 2 * i]) - tonumber(r[o + 2 * j - 1]) - held
    if remaining < 0 then
      out = nil -- does not fit
      break
    end
    -- live reservations count as usage settled now: the newest bucket is now's
    out[2 + 2 * i], out[3 + 2 * i] = remaining, jreset[j]
  end
  if out then
    local dl = now + lease
    local dls = idx(dl)
    redis.call('ZADD', D, dls, id)
    local f = { id, ARGV[base + 1], '#', idx(held) }
    if dl < e then
      f[5], f[6] = 'e', dls
    end
    -- TTLs (see the marks 'xa' and 'xd' above): renewed only when they could run out within
    -- ttl, then to ttl plus a slack, and the new lower bound recorded.
    local ttl = tonumber(ARGV[1])
    local need = now + ttl
    local ext, mark = ttl + math.min(floor(ttl / 8), 60000), nil
    if tonumber(r[rm] or 0) < need then
      extend(A, ext)
      mark = idx(now + ext - 10) -- 10 ms below: PEXPIRE counts from the call's start
      f[#f + 1], f[#f + 2] = 'xa', mark
    end
    if before <= 0 then
      -- No reservation was held: KEYS[2] was empty, so this call created it (or it holds only
      -- ids without a hold, which nothing charges): its TTL is ours to set, in one command.
      redis.call('PEXPIRE', D, ext)
      f[#f + 1], f[#f + 2] = 'xd', mark or idx(now + ext - 10)
    elseif tonumber(r[rm + 1] or 0) < need then
      extend(D, ext)
      f[#f + 1], f[#f + 2] = 'xd', mark or idx(now + ext - 10)
    end
    redis.call('HSET', A, unpack(f))
    return out
  end
end

-- @common

local held_before, swept = prepare(r, id)
if not held_before and ((gone and gone[id]) or tombof(r[rm - 1])) then
  commit(swept, false, false)
  return { -1 }
end
local repeated = held_before and true or false
local res = reserved
if repeated then
  -- Already admitted (and held in reserved): check nothing more, write nothing.
  res = reserved - est
end

local admit = true
local sums = {}
for i = 1, nb do
  local o = base + 4 + 2 * i
  local s = settled(windows[tonumber(ARGV[o - 1])])
  sums[i] = s
  if s + res + est > tonumber(ARGV[o]) and not repeated then
    admit = false
  end
end

local held = res
if admit then
  held = res + est
end

local earliest_live = nil
local out = { 0, 0, 0 }
local worst = -1
for i = 1, nb do
  local o = base + 4 + 2 * i
  local win = windows[tonumber(ARGV[o - 1])]
  local cap = tonumber(ARGV[o])
  local s = sums[i]
  local w = win.wd.w
  local remaining = cap - s - held
  if remaining < 0 then
    remaining = 0
  end
  local newest = nil
  local bs = nil
  if held > 0 and not win.exact then
    newest = win.wd.cur -- no bucket is newer than now
  else
    bs = buckets(win)
    for _, x in ipairs(bs) do
      if x[2] > 0 then
        newest = x[1]
      end
    end
    if held > 0 and (newest == nil or win.wd.cur > newest) then
      newest = win.wd.cur
    end
  end
  local reset = 0
  if newest ~= nil then
    reset = (newest + 1) * w + win.win - now
    if reset < 0 then
      reset = 0
    end
  end
  out[#out + 1] = remaining
  out[#out + 1] = reset

  if not admit and s + res + est > cap then
    local need = s + res + est - cap
    local freed = 0
    local wait = nil
    for _, x in ipairs(bs or buckets(win)) do
      if x[2] > 0 then
        freed = freed + x[2]
        if freed >= need then
          wait = (x[1] + 1) * w + win.win - now
          if wait < 1 then
            wait = 1
          end
          break
        end
      end
    end
    if wait == nil then
      if earliest_live == nil then
        local e = redis.call('ZRANGE', D, 0, 0, 'WITHSCORES')
        earliest_live = -1
        if #e == 2 then
          earliest_live = tonumber(e[2])
        end
      end
      wait = 1000
      if earliest_live >= 0 and earliest_live - now > wait then
        wait = earliest_live - now
      end
    end
    if wait > worst then
      worst = wait
      out[2] = i
      out[3] = wait
    end
  end
end

if admit then
  out[1] = 1
end
if admit and not repeated then
  local dl = now + lease
  reserved, rdirty = reserved + est, true
  if earliest == nil or dl < earliest then
    earliest, edirty = dl, true
  end
  redis.call('ZADD', D, idx(dl), id)
  commit(true, true, true, { id, ARGV[base + 1] })
else
  commit(swept, false, false)
end
return out
