-- quotaqual ledger: the head of every script (ledger/valkey.go prepends it, and puts
-- common.lua where a script says "-- @common"; common.lua describes the keys, fields and
-- ARGV). The head reads the store clock and, in one HMGET, every bookkeeping field of KEYS[1]
-- the call needs. A script's fast path decides from that alone when the totals are current
-- (see current); otherwise it falls through to common.lua's general machinery, which starts
-- from the same read. The fast paths are the general path's own arithmetic with everything
-- known to be a no-op left out: no lease ran out, no watermark moves, no bucket is newer than
-- now.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local floor = math.floor
local A, D = KEYS[1], KEYS[2]
local nwd = tonumber(ARGV[3]) -- width i: ARGV[2 + 2i] width_ms, ARGV[3 + 2i] max_window_ms
local X = KEYS[3 + nwd] -- tombstone expiries (see common.lua)
local wbase = 4 + 2 * nwd -- ARGV[wbase] nwindows; window j: ARGV[wbase - 1 + 2j] window_ms,
local nwin = tonumber(ARGV[wbase]) -- ARGV[wbase + 2j] its width slot
local base = wbase + 2 * nwin

local function idx(n)
  return string.format('%d', n)
end

-- extend gives key a TTL of ttl ms unless it already has a longer one. Two policies for one
-- rule (a rolling deploy that changes the lease or the windows) share these keys, and a plain
-- PEXPIRE from the shorter one would cut the TTL of state the longer one still holds — a live
-- lease vanishing uncharged. GT lengthens an existing TTL (the usual case: one call); NX sets
-- the TTL of a key that has none yet.
local function extend(key, ttl)
  if redis.call('PEXPIRE', key, ttl, 'GT') == 0 then
    redis.call('PEXPIRE', key, ttl, 'NX')
  end
end

-- state reads '#', 'e', 'v', then h<w> per width, then t<W>, l<W> per window, then extra (a
-- reservation id) and its tombstone '~'..extra when given. A missing field reads false.
local function state(extra)
  local f = { '#', 'e', 'v' }
  for i = 1, nwd do
    f[3 + i] = 'h' .. ARGV[2 + 2 * i]
  end
  local o = 3 + nwd
  for j = 1, nwin do
    local ws = ARGV[wbase - 1 + 2 * j]
    f[o + 2 * j - 1] = 't' .. ws
    f[o + 2 * j] = 'l' .. ws
  end
  if extra then
    f[o + 2 * nwin + 1] = extra
    f[o + 2 * nwin + 2] = '~' .. extra
  end
  return redis.call('HMGET', A, unpack(f))
end

-- current reports whether state r holds this quota's totals, exact at now: 'v' is this
-- quota's signature, no lease can have run out ('e' > now), no bucket is newer than now, and
-- every window's watermark is its low end at now. Then window j counts exactly t<W_j>.
local function current(r)
  if r[3] ~= ARGV[2] or not r[2] or tonumber(r[2]) <= now then
    return false
  end
  for i = 1, nwd do
    local h = r[3 + i]
    if not h or tonumber(h) > floor(now / tonumber(ARGV[2 + 2 * i])) then
      return false
    end
  end
  local o = 3 + nwd
  for j = 1, nwin do
    local l = r[o + 2 * j]
    if not r[o + 2 * j - 1] or not l then
      return false
    end
    local w = tonumber(ARGV[2 + 2 * tonumber(ARGV[wbase + 2 * j])])
    if tonumber(l) ~= floor((now - tonumber(ARGV[wbase - 1 + 2 * j])) / w) then
      return false
    end
  end
  return true
end
