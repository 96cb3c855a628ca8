-- reserve: ARGV[base+1] estimate, [base+2] lease_ms, [base+3] id, [base+4] nbudgets, then per
-- budget: window slot (1-based index into the windows), capacity.
-- Returns {admitted, refusing budget (1-based, 0 when admitted), retry_after_ms,
--          remaining_1, reset_ms_1, remaining_2, reset_ms_2, ...}.
-- Idempotent by id: a retry of a call whose reply was lost finds its reservation live and
-- reports it admitted again without holding the estimate twice.
-- Returns {-1} for an id with a tombstone (common.lua): its reservation already ended, or it
-- was released before this call ran (a timed-out reserve overtaken by its release). Nothing is
-- held.
local est = ARGV[base + 1] + 0
local lease = ARGV[base + 2] + 0
local id = ARGV[base + 3]
local nb = ARGV[base + 4] == '1' and 1 or ARGV[base + 4] + 0

-- Fast path of the usual layout (one width, one window, one budget): the totals are current
-- and the id is new (neither live nor tombstoned) — current's tests, written out — and the
-- estimate fits. It reads the fields state(id, 'xa') reads, in its order (ARGV[4] width_ms,
-- ARGV[7] window_ms, ARGV[base + 6] the capacity), so the general path below reuses the read.
-- It makes hold's usual write (below) inline; an admission that moves 'e' or renews the TTL
-- goes on to the fast path of every other layout, which holds it from the same read (fits: the
-- remaining it computed).
local r1, fits
if nwd == 1 and nwin == 1 and nb == 1 then
  local w, ws = ARGV[4], ARGV[7]
  r1 = redis.call('HMGET', A, '#', 'e', 'v', 'h' .. w, 't' .. ws, 'l' .. ws, 'b' .. w, id, 'xa', '~' .. id)
  local e, h, tw, l = r1[2], r1[4], r1[5], r1[6]
  if r1[3] == ARGV[2] and e and h and tw and l and not r1[8] and not r1[10] then
    local wn, win = w + 0, ws + 0
    local cur = floor(now / wn)
    local held = (r1[1] or 0) + est
    local remaining = ARGV[base + 6] - tw - held
    e = e + 0
    if e > now and h + 0 <= cur and l + 0 == floor((now - win) / wn) and remaining >= 0 then
      local dl = now + lease
      if dl >= e and (r1[9] or 0) + 0 >= now + ARGV[1] then
        redis.call('HSET', A, id, ARGV[base + 1] .. ' ' .. format('%d', dl), '#', format('%d', held))
        -- live reservations count as usage settled now: the newest bucket is now's
        return { 1, 0, 0, remaining, (cur + 1) * wn + win - now }
      end
      fits = remaining -- for the other layouts' fast path, which holds it
    end
  end
end

-- @state

local r = state(id, 'xa', false, r1)

-- hold writes an admission on a fast path: the reservation's field, '#' (held: the tokens held
-- with it), 'e' when its deadline is earlier than e (the current 'e'), and KEYS[1]'s TTL when
-- it could run out within ttl: its field 'xa' (xa) is a lower bound of its expiry (store clock,
-- ms). A renewal sets the TTL to ttl plus a slack (an eighth of ttl, at most a minute) and
-- records the new bound, so a key in steady use gets one PEXPIRE per slack instead of one per
-- call, and lives at least ttl after every reserve (at most ttl plus the slack). 'xa' lives in
-- the hash it describes: it goes when the hash goes.
local function hold(held, e, xa)
  local dl = now + lease
  local dls = idx(dl)
  local ttl = ARGV[1] + 0
  local renew = (xa or 0) + 0 < now + ttl
  if dl >= e and not renew then
    -- the usual write, without building a table for it
    redis.call('HSET', A, id, ARGV[base + 1] .. ' ' .. dls, '#', idx(held))
    return
  end
  local f = { id, ARGV[base + 1] .. ' ' .. dls, '#', idx(held) }
  if dl < e then
    f[5], f[6] = 'e', dls
  end
  if renew then
    local ext = ttl + math.min(floor(ttl / 8), 60000)
    extend(A, ext)
    f[#f + 1], f[#f + 2] = 'xa', idx(now + ext - 10) -- 10 ms below: PEXPIRE counts from the call's start
  end
  redis.call('HSET', A, unpack(f))
end

-- Fast path of every other layout: the totals are current and the id is new. Admit when the
-- estimate fits every window; a denial (which needs the buckets for its retry-after) takes the
-- general path.
local e = (not r1 or fits) and current(r)
if e and not r[rx] and not r[rt] then
  local held = (r[1] or 0) + est
  local o = 3 + nwd
  local out = { 1, 0, 0 }
  for i = 1, nb do
    local j = 1
    if nwin > 1 then
      j = ARGV[base + 3 + 2 * i] + 0
    end
    local remaining = fits or ARGV[base + 4 + 2 * i] - r[o + 2 * j - 1] - held
    if remaining < 0 then
      out = nil -- does not fit
      break
    end
    -- live reservations count as usage settled now: the newest bucket is now's
    out[2 + 2 * i], out[3 + 2 * i] = remaining, jreset[j]
  end
  if out then
    hold(held, e, r[rm])
    return out
  end
end

-- @common

local held_before, swept = prepare(r, id)
if not held_before and ((gone and gone[id]) or tombof(r[rt])) then
  commit(swept, false)
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
        earliest_live = -1
        for _, x in ipairs(live()) do
          if earliest_live < 0 or x[3] < earliest_live then
            earliest_live = x[3]
          end
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
  commit(true, true, { id, ARGV[base + 1] .. ' ' .. idx(dl) })
else
  commit(swept, false)
end
return out
