-- quotaqual ledger: the state machinery of every script (ledger/valkey.go puts it where a
-- script says "-- @state", after head.lua, whose locals it uses).

-- The helpers of every path past the fast paths (which write their few values inline): a
-- function statement builds a closure and its upvalues on each call that reaches it.
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

-- estof is the estimate (a string) of a reservation field's value "<estimate> <deadline_ms>"
-- (see common.lua), or nil when the field is absent.
local function estof(v)
  if not v then
    return nil
  end
  return string.sub(v, 1, string.find(v, ' ', 1, true) - 1)
end

-- Each number the fast paths use is converted from its ARGV text once, here. Width i: wcur[i]
-- now's bucket. Window j: jlo[j] its low end at now (the oldest bucket it counts), jreset[j] when
-- all of it would have left the window if now's bucket were its newest (ms from now). The
-- tables are built with one slot (a constructor sizes them): the first insert into an empty
-- table would resize it.
local wcur, jlo, jreset = { 0 }, { 0 }, { 0 }
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

-- state reads, in one HMGET, '#', 'e', 'v', then h<w> per width, then t<W>, l<W> per window,
-- then b<w> per width (r[ob + i]: the tokens of bucket h<w> not yet in the width's hash, see
-- common.lua), then extra (a reservation id) at r[rx] and the field m1 a script's fast path also
-- needs at r[rm] when given, then extra's tombstone '~'..extra at r[rt] — unless lazytomb: then
-- r[rt] stays nil until tombstone (common.lua) reads it, for settle, whose fast path (a live id)
-- needs no tombstone (a live id has none). A missing field reads false. names[k] is the field
-- r[k] holds. Each field read costs the store a walk of the hash: read only what a path needs.
-- got: the reply of the same read, made already by a script's own fast path (then returned).
local rx, rm, rt, names
local ob = 3 + nwd + 2 * nwin
local function state(extra, m1, lazytomb, got)
  local f
  if nwd == 1 and nwin == 1 then
    -- the usual shape, built in one constructor (no table growth)
    local w, ws = ARGV[4], ARGV[wbase + 1]
    f = { '#', 'e', 'v', 'h' .. w, 't' .. ws, 'l' .. ws, 'b' .. w }
  else
    f = { '#', 'e', 'v' }
    for i = 1, nwd do
      f[3 + i] = 'h' .. ARGV[2 + 2 * i]
    end
    local o = 3 + nwd
    for j = 1, nwin do
      local ws = ARGV[wbase - 1 + 2 * j]
      f[o + 2 * j - 1] = 't' .. ws
      f[o + 2 * j] = 'l' .. ws
    end
    for i = 1, nwd do
      f[ob + i] = 'b' .. ARGV[2 + 2 * i]
    end
  end
  names = f
  local n = ob + nwd
  if extra then
    n = n + 1
    f[n], rx = extra, n
  end
  if m1 then
    n = n + 1
    f[n], rm = m1, n
  end
  if extra then
    rt = n + 1
    if not lazytomb then
      n = n + 1
      f[n] = '~' .. extra
    end
  end
  return got or redis.call('HMGET', A, unpack(f, 1, n))
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
