-- reserve: ARGV[base+1] estimate, [base+2] lease_ms, [base+3] id, [base+4] nbudgets, then per
-- budget: window_ms, capacity, width slot (1-based index into the widths).
-- Returns {admitted, refusing budget (1-based, 0 when admitted), retry_after_ms,
--          remaining_1, reset_ms_1, remaining_2, reset_ms_2, ...}.
-- Idempotent by id: a retry of a call whose reply was lost finds its reservation live and
-- reports it admitted again without holding the estimate twice.
local est = tonumber(ARGV[base + 1])
local lease = tonumber(ARGV[base + 2])
local id = ARGV[base + 3]
local nb = tonumber(ARGV[base + 4])

local swept = sweep()
local buckets = prune()
local reserved = reserved_tokens()
local repeated = redis.call('HEXISTS', KEYS[1], id) == 1
if repeated then
  -- Already admitted (and held in reserved): check nothing more, write nothing.
  reserved = reserved - est
end

local budgets = {}
local admit = true
for i = 1, nb do
  local o = base + 4 + 3 * (i - 1)
  local b = { window = tonumber(ARGV[o + 1]), cap = tonumber(ARGV[o + 2]), slot = tonumber(ARGV[o + 3]) }
  b.w = widths[b.slot].w
  b.buckets = {}
  local lo, hi = fdiv(now - b.window, b.w), fdiv(now, b.w)
  local s = 0
  for _, x in ipairs(buckets[b.slot]) do
    if x[1] >= lo and x[1] <= hi then
      s = s + x[2]
      b.buckets[#b.buckets + 1] = x
    end
  end
  b.settled = s
  if s + reserved + est > b.cap and not repeated then
    admit = false
  end
  budgets[i] = b
end

local held = reserved
if admit then
  held = reserved + est
end

local earliest = nil
local out = { 0, 0, 0 }
local worst = -1
for i, b in ipairs(budgets) do
  local remaining = b.cap - b.settled - held
  if remaining < 0 then
    remaining = 0
  end
  local newest = nil
  for _, x in ipairs(b.buckets) do
    if x[2] > 0 then
      newest = x[1]
    end
  end
  if held > 0 then
    local cur = fdiv(now, b.w)
    if newest == nil or cur > newest then
      newest = cur
    end
  end
  local reset = 0
  if newest ~= nil then
    reset = (newest + 1) * b.w + b.window - now
    if reset < 0 then
      reset = 0
    end
  end
  out[#out + 1] = remaining
  out[#out + 1] = reset

  if not admit and b.settled + reserved + est > b.cap then
    local need = b.settled + reserved + est - b.cap
    local freed = 0
    local wait = nil
    for _, x in ipairs(b.buckets) do
      if x[2] > 0 then
        freed = freed + x[2]
        if freed >= need then
          wait = (x[1] + 1) * b.w + b.window - now
          if wait < 1 then
            wait = 1
          end
          break
        end
      end
    end
    if wait == nil then
      if earliest == nil then
        local e = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
        earliest = -1
        if #e == 2 then
          earliest = tonumber(e[2])
        end
      end
      wait = 1000
      if earliest >= 0 and earliest - now > wait then
        wait = earliest - now
      end
    end
    if wait > worst then
      worst = wait
      out[2] = i
      out[3] = wait
    end
  end
end

if admit and repeated then
  out[1] = 1
elseif admit then
  out[1] = 1
  redis.call('HSET', KEYS[1], id, ARGV[base + 1])
  redis.call('HINCRBY', KEYS[1], '#', ARGV[base + 1])
  redis.call('ZADD', KEYS[2], idx(now + lease), id)
  touch()
elseif swept then
  touch()
end
return out
