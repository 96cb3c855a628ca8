-- quotaqual ledger: shared prelude of every script (ledger/valkey.go prepends it).
--
-- Keys of one quota key, all under one hash tag <ns>:{<hash>} so they live in one slot:
--   KEYS[1]   <p>:a          hash  reservation id -> estimate; field '#' = tokens held by live
--                                   reservations
--   KEYS[2]   <p>:d          zset  reservation id -> lease deadline (ms, store clock)
--   KEYS[3..] <p>:s<width_s> hash  bucket index (floor(ms / width)) -> settled tokens, one hash
--                                   per distinct bucket width of the quota
-- ARGV of every script starts with:
--   [1] ttl_ms  [2] nwidths  then per width, in KEYS[3..] order: width_ms, max_window_ms
-- and the script's own arguments follow at ARGV[base + 1].
--
-- The expiry sweep writes exactly the keys admission reads (KEYS[1], KEYS[2], KEYS[3..]): an
-- expired reservation's estimate is charged into the bucket of its deadline in every width
-- hash and its hold is removed from '#'. This mirrors ledger/accounting.go; the conformance
-- suite holds the two to identical results.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local ttl = tonumber(ARGV[1])
local nwidths = tonumber(ARGV[2])
local widths = {}
for i = 1, nwidths do
  widths[i] = { key = KEYS[2 + i], w = tonumber(ARGV[1 + 2 * i]), maxwin = tonumber(ARGV[2 + 2 * i]) }
end
local base = 2 + 2 * nwidths

local function fdiv(a, b)
  return math.floor(a / b)
end

local function idx(n)
  return string.format('%d', n)
end

-- touch gives every key of the quota key the TTL again (keys that do not exist are skipped
-- by PEXPIRE itself).
local function touch()
  for i = 1, #KEYS do
    redis.call('PEXPIRE', KEYS[i], ttl)
  end
end

-- sweep charges every reservation whose lease ran out (deadline <= now) at its estimate, in
-- the bucket of its deadline, and frees its hold. Returns true when it changed anything.
local function sweep()
  local exp = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', idx(now), 'WITHSCORES')
  if #exp == 0 then
    return false
  end
  local freed = 0
  for i = 1, #exp, 2 do
    local est = redis.call('HGET', KEYS[1], exp[i])
    if est then
      local dl = tonumber(exp[i + 1])
      for _, w in ipairs(widths) do
        redis.call('HINCRBY', w.key, idx(fdiv(dl, w.w)), est)
      end
      freed = freed + tonumber(est)
      redis.call('HDEL', KEYS[1], exp[i])
    end
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', idx(now))
  if freed ~= 0 then
    redis.call('HINCRBY', KEYS[1], '#', idx(-freed))
  end
  return true
end

-- prune deletes buckets older than the longest window of their width and returns, per width,
-- the remaining non-empty buckets as a list of {index, tokens}. At most ~62 fields per width.
local function prune()
  local out = {}
  for i, w in ipairs(widths) do
    local lo = fdiv(now - w.maxwin, w.w)
    local all = redis.call('HGETALL', w.key)
    local keep = {}
    for j = 1, #all, 2 do
      local b = tonumber(all[j])
      if b < lo then
        redis.call('HDEL', w.key, all[j])
      else
        local v = tonumber(all[j + 1])
        if v ~= 0 then
          keep[#keep + 1] = { b, v }
        end
      end
    end
    table.sort(keep, function(x, y) return x[1] < y[1] end)
    out[i] = keep
  end
  return out
end

local function reserved_tokens()
  return tonumber(redis.call('HGET', KEYS[1], '#') or '0')
end

-- window_settled sums the buckets a window counts at now: floor((now-window)/w) ..
-- floor(now/w), inclusive. buckets is sorted by index.
local function window_settled(buckets, window, w)
  local lo, hi = fdiv(now - window, w), fdiv(now, w)
  local s = 0
  for _, b in ipairs(buckets) do
    if b[1] >= lo and b[1] <= hi then
      s = s + b[2]
    end
  end
  return s
end
