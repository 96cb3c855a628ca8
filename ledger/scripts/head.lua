-- quotaqual ledger: the head of every script (ledger/valkey.go prepends it, and puts
-- common.lua where a script says "-- @common"; common.lua describes the keys, fields and
-- ARGV). The head reads the store clock and, in one HMGET, every bookkeeping field of KEYS[1]
-- the call needs. A script's fast path decides from that alone when the totals are current
-- (see current); otherwise it falls through to common.lua's general machinery, which starts
-- from the same read. The fast paths are the general path's own arithmetic with everything
-- known to be a no-op left out: no lease ran out, no watermark moves, no bucket is newer than
-- now.
-- The globals the fast paths use, read once (each use of a global is a table lookup).
-- The fast paths turn a number's text into a number with arithmetic ("x + 0"): one strtod,
-- where tonumber(x) makes two (it checks, then converts). A conversion is some five hundred
-- instructions, and with the commands and the string interning the bulk of a fast path's time.
local tonumber, ARGV, KEYS, format = tonumber, ARGV, KEYS, string.format
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local floor = math.floor
local A = KEYS[1]
local nwd = #KEYS - 2 -- width i: KEYS[1 + i] its bucket hash, ARGV[2 + 2i] width_ms, ARGV[3 + 2i] max_window_ms
local X = KEYS[2 + nwd] -- tombstone expiries (see common.lua)
local wbase = 4 + 2 * nwd -- ARGV[wbase] nwindows; window j: ARGV[wbase - 1 + 2j] window_ms,
local nwin = ARGV[wbase] + 0 -- ARGV[wbase + 2j] its width slot
local base = wbase + 2 * nwin
-- MAXT is 2^53, the largest capacity and the largest integer a Lua number holds exactly: one
-- charge and one bucket saturate there (beyond it every window is full anyway).
local MAXT = 9007199254740992

-- Each number the fast paths use is converted from its ARGV text once, here. Width i: wcur[i] now's bucket. Window j: jlo[j] its low end at
-- now (the oldest bucket it counts), jreset[j] when all of it would have left the window if
-- now's bucket were its newest (ms from now).
local wcur, jlo, jreset = {}, {}, {}
for i = 1, nwd do
  wcur[i] = floor(now / ARGV[2 + 2 * i])
end
for j = 1, nwin do
  local win, s = ARGV[wbase - 1 + 2 * j] + 0, 1
  if nwd > 1 then
    s = ARGV[wbase + 2 * j] + 0
  end
  local w = ARGV[2 + 2 * s] + 0
  jlo[j], jreset[j] = floor((now - win) / w), (wcur[s] + 1) * w + win - now
end

local function idx(n)
  return format('%d', n)
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

-- state reads '#', 'e', 'v', then h<w> per width, then t<W>, l<W> per window, then b<w> per
-- width (r[ob + i]: the tokens of bucket h<w> not yet in the width's hash, see common.lua), then
-- extra (a reservation id) and its tombstone '~'..extra when given, then the fields m1, m2 a
-- script's fast path also needs, at r[rm], r[rm + 1]. A missing field reads false. names[k] is
-- the field r[k] holds.
local rm, names
local ob = 3 + nwd + 2 * nwin
local function state(extra, m1, m2)
  local f = { '#', 'e', 'v' }
  names = f
  for i = 1, nwd do
    f[3 + i] = 'h' .. ARGV[2 + 2 * i]
    f[ob + i] = 'b' .. ARGV[2 + 2 * i]
  end
  local o = 3 + nwd
  for j = 1, nwin do
    local ws = ARGV[wbase - 1 + 2 * j]
    f[o + 2 * j - 1] = 't' .. ws
    f[o + 2 * j] = 'l' .. ws
  end
  rm = ob + nwd + 1
  if extra then
    f[rm] = extra
    f[rm + 1] = '~' .. extra
    rm = rm + 2
  end
  f[rm], f[rm + 1] = m1, m2
  return redis.call('HMGET', A, unpack(f))
end

-- estof is the estimate (a string) of a reservation field's value "<estimate> <deadline_ms>"
-- (see common.lua), or nil when the field is absent.
local function estof(v)
  if not v then
    return nil
  end
  return string.sub(v, 1, string.find(v, ' ', 1, true) - 1)
end

-- current reports whether state r holds this quota's totals, exact at now: 'v' is this
-- quota's signature, no lease can have run out ('e' > now), no bucket is newer than now, and
-- every window's watermark is its low end at now. Then window j counts exactly t<W_j>. It
-- returns 'e' (a number) when they are, nil otherwise.
local function current(r)
  local e = r[3] == ARGV[2] and r[2] and r[2] + 0
  if not e or e <= now then
    return nil
  end
  for i = 1, nwd do
    local h = r[3 + i]
    if not h or h + 0 > wcur[i] then
      return nil
    end
  end
  local o = 3 + nwd
  for j = 1, nwin do
    local l = r[o + 2 * j]
    if not r[o + 2 * j - 1] or not l or l + 0 ~= jlo[j] then
      return nil
    end
  end
  return e
end
