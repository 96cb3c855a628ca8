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
local r = state(id)

-- Fast path: the totals are current and the id is new. Admit when the estimate fits every
-- window; a denial (which needs the buckets for its retry-after) takes the general path.
if current(r) and not r[4 + nwd + 2 * nwin] and not r[5 + nwd + 2 * nwin] then
  local held = tonumber(r[1] or '0') + est
  local o = 3 + nwd
  local fits = true
  for i = 1, nb do
    local j = tonumber(ARGV[base + 3 + 2 * i])
    if tonumber(r[o + 2 * j - 1]) + held > tonumber(ARGV[base + 4 + 2 * i]) then
      fits = false
      break
    end
  end
  if fits then
    local out = { 1, 0, 0 }
    for i = 1, nb do
      local j = tonumber(ARGV[base + 3 + 2 * i])
      local remaining = tonumber(ARGV[base + 4 + 2 * i]) - tonumber(r[o + 2 * j - 1]) - held
      if remaining < 0 then
        remaining = 0
      end
      -- live reservations count as usage settled now: the newest bucket is now's
      local w = tonumber(ARGV[2 + 2 * tonumber(ARGV[wbase + 2 * j])])
      out[2 + 2 * i] = remaining
      out[3 + 2 * i] = (floor(now / w) + 1) * w + tonumber(ARGV[wbase - 1 + 2 * j]) - now
    end
    local dl = now + lease
    redis.call('ZADD', D, idx(dl), id)
    if dl < tonumber(r[2]) then
      redis.call('HSET', A, id, ARGV[base + 1], '#', idx(held), 'e', idx(dl))
    else
      redis.call('HSET', A, id, ARGV[base + 1], '#', idx(held))
    end
    extend(A, ARGV[1])
    extend(D, ARGV[1])
    return out
  end
end

-- @common

local held_before, swept = prepare(r, id)
if not held_before and ((gone and gone[id]) or tombof(r[5 + nwd + 2 * nwin])) then
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
