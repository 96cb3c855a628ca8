-- quotaqual ledger: the general machinery of every script (ledger/valkey.go puts it where a
-- script says "-- @common", after head.lua, which reads the clock, and state.lua, which reads
-- the state).
--
-- Keys of one quota key, all under one hash tag <ns>:{<hash>} so they live in one slot:
--   KEYS[1]   <p>:r          hash  reservation id -> "<estimate> <deadline>" (the lease deadline,
--                                   ms, store clock), and the bookkeeping fields:
--                                   '#'        tokens held by live reservations
--                                   'e'        a lower bound of the earliest deadline of a live
--                                              reservation (absent: unknown)
--                                   'v'        the signature (window list) of the quota whose
--                                              running totals the fields below are
--                                   'h<w_ms>'  the highest bucket index written for the width
--                                   'b<w_ms>'  the tokens of bucket h<w_ms> not yet added to the
--                                              width's hash (see "pending" below)
--                                   't<W_ms>'  window W's running total: the sum of every
--                                              bucket of its width with index >= l<W_ms>
--                                   'l<W_ms>'  window W's low watermark: the oldest bucket it
--                                              counts, floor((then - W) / width) at the last call
--                                   'M'        every bucket width any policy for the rule
--                                              declared, with its longest window (see below)
--   KEYS[2..] <p>:s<width_s> hash  bucket index (floor(ms / width)) -> settled tokens, one hash
--                                   per distinct bucket width of the quota
-- A reservation's deadline lives in its own field's value, so that a reserve and a settle each
-- write KEYS[1] alone; the expiry sweep, which runs only once 'e' has passed, reads KEYS[1]
-- whole to find the leases that ran out (a reservation value is the only one with a space).
--
-- Pending bucket: settle's fast path charges the bucket of now of each width into 'b<w_ms>'
-- (with 'h<w_ms>' its index) in the one write it makes to KEYS[1], instead of into the width's
-- hash; when a later settle's bucket is newer, it first adds the pending tokens to the hash.
-- The totals count pending tokens like any other. Every general path adds them to the hash
-- first (see flush), so that everything below reads the buckets whole from the hashes. KEYS[1]
-- lives at least as long as a pending bucket counts: it held the settled reservation, so its
-- TTL covers the lease plus the longest window plus a width from the reserve on.
-- ARGV of every script starts with:
--   [1] ttl_ms  [2] signature  [3] nwidths  then per width, in KEYS[2..] order: width_ms,
--   max_window_ms;  then nwindows, then per distinct window: window_ms, width slot (1-based)
-- and the script's own arguments follow at ARGV[base + 1]. The last key, KEYS[2 + nwidths], is the
-- tombstone list (see below).
--
-- Admission reads O(1) fields per window: the running totals, kept exact by every write (a
-- charge into bucket b adds to every total whose watermark is <= b) and advanced lazily (when a
-- window's low end moves past buckets, those are read with one HMGET of exactly the indices
-- that left and subtracted; the longest window of a width deletes them). A window whose width
-- hash holds nothing at or above its new low end (h < lo) is known empty without a read. The
-- totals are only trusted when 'v' is this quota's signature and the store clock has not gone
-- back past a written bucket; otherwise the call reads the width hashes whole (bounded: pruned
-- to the longest window) and, when 'v' differed, rebuilds the totals for this quota.
--
-- The expiry sweep writes exactly what admission reads (KEYS[1], KEYS[2..] and the totals):
-- an expired reservation's estimate is charged into the bucket of its deadline in every width
-- hash (and every total counting that bucket) and its hold is removed from '#'. A bucket
-- older than the longest window of its width is outside every window and not written. This
-- mirrors ledger/accounting.go; the conformance suite holds the two to identical results.
--
-- Tombstones: an id whose reservation ended without a settlement (its lease ran out: the sweep
-- charged its estimate) or that was settled while not live (a release of a reserve that may not
-- have run yet) keeps a field '~<id>' in KEYS[1]: "<charged>:<expires_ms>", where charged is
-- the estimate the sweep charged, or '-' once nothing more may be charged (settled, or never
-- held). A late settle of an expired id charges only its usage above that estimate (never a
-- refund), once; a reserve of a tombstoned id is refused, so a timed-out reserve that reaches
-- the store after its release cannot hold its estimate. A tombstone lives ttl (the longest
-- window plus the lease); KEYS[2 + nwidths] (zset id -> expiry) lists them so that each call
-- that writes tombstones first deletes the expired ones: their number is bounded by the ids
-- ended within one ttl. The head's HMGET reads an id's tombstone with its other fields, so the
-- fast paths cost no extra command.
--
-- TTLs: a key that gains data gets the TTL again (extend: never shortened): KEYS[1] when a
-- reservation is added or renewed or a call creates it; a bucket hash whenever the general path
-- writes it or makes the totals this quota's, and on settle's fast path only when it creates a
-- bucket (see there). KEYS[1] may outlive a bucket hash: one that expired held only buckets
-- older than every window, which the h < lo rule counts as empty. KEYS[1] may also expire first
-- (it lives as long as its reservations need): then 'v' is gone and the next call rebuilds the
-- totals from the buckets.

local ttl = ARGV[1]
local sig = ARGV[2]
local NONE = '4503599627370496' -- 'e' when no reservation is live

-- widths[i] = { key, w, maxwin, lo (of maxwin at now), h, all (buckets, when read whole) }
-- windows[j] = { win, wd (its width), lo, t, l, exact (use the buckets, not the total) }
local widths, windows = {}, {}
local p = 4
for i = 1, tonumber(ARGV[3]) do
  local w = tonumber(ARGV[p])
  local maxwin = tonumber(ARGV[p + 1])
  widths[i] = { key = KEYS[1 + i], w = w, hf = 'h' .. ARGV[p], bf = 'b' .. ARGV[p], maxwin = maxwin, lo = floor((now - maxwin) / w), cur = floor(now / w) }
  p = p + 2
end
for j = 1, tonumber(ARGV[p]) do
  local win = tonumber(ARGV[p + 1])
  local wd = widths[tonumber(ARGV[p + 2])]
  windows[j] = { win = win, tf = 't' .. ARGV[p + 1], lf = 'l' .. ARGV[p + 1], wd = wd, lo = floor((now - win) / wd.w), prune = (win == wd.maxwin) }
  p = p + 2
end

local reserved = 0
local earliest = nil -- lower bound of the earliest deadline (nil: unknown)
local aexists = false
-- Changed bookkeeping fields, written back by commit. statechanged: the totals, watermarks or
-- 'e' moved (kept with any write to KEYS[1], or alone when KEYS[1] exists).
local statechanged, rdirty, edirty, vdirty = false, false, false, false
local prunes = nil -- width -> list of bucket fields to delete (only with the state persisted)
local gone = nil -- ids the sweep removed in this call -> the estimate it charged

-- Two policies for one rule (a rolling change of its windows) share these keys. 'M' of KEYS[1]
-- lists every bucket width any of them declared, each with the longest window declared for it
-- ("<width_ms>:<window_ms>,..."). The buckets such a window still counts are kept (never pruned
-- by a shorter window) and the expiry sweep charges every listed width, whichever policy calls,
-- as the memory backend's wheels do. The list only grows while KEYS[1] lives. foreign are the
-- listed widths this quota does not have: { w, keep, key, lo }.
local foreign = {}
local newM = nil
do
  local known, order = {}, {}
  local M = r[rm] -- read by state in the head when the fast path needed it
  if names[rm] ~= 'M' then
    M = redis.call('HGET', A, 'M')
  end
  if M then
    for w, k in string.gmatch(M, '(%d+):(%d+)') do
      known[tonumber(w)] = tonumber(k)
      order[#order + 1] = tonumber(w)
    end
  end
  local changed = false
  for _, wd in ipairs(widths) do
    local k = known[wd.w]
    if k == nil then
      order[#order + 1] = wd.w
      k = 0
    end
    wd.keep = math.max(k, wd.maxwin)
    wd.lo = floor((now - wd.keep) / wd.w)
    if k < wd.maxwin then
      known[wd.w], changed = wd.maxwin, true
    end
  end
  for _, win in ipairs(windows) do
    win.prune = (win.win >= win.wd.keep)
  end
  local prefix = string.sub(A, 1, -3)
  local parts = {}
  for _, w in ipairs(order) do
    parts[#parts + 1] = idx(w) .. ':' .. idx(known[w])
    local own = false
    for _, wd in ipairs(widths) do
      own = own or wd.w == w
    end
    if not own then
      foreign[#foreign + 1] = { w = w, keep = known[w], key = prefix .. ':s' .. idx(w / 1000), lo = floor((now - known[w]) / w) }
    end
  end
  if changed then
    newM, statechanged = table.concat(parts, ','), true
  end
end

-- chargeforeign charges tokens at time t (ms) into every foreign width's bucket that its
-- longest window still counts; that width's policy rebuilds its totals from the buckets when
-- it next calls (its totals are not the ones KEYS[1] holds now).
local function chargeforeign(t, tokens)
  local ownwin = 0
  for _, wd in ipairs(widths) do
    ownwin = math.max(ownwin, wd.maxwin)
  end
  for _, fw in ipairs(foreign) do
    local b = floor(t / fw.w)
    if b >= fw.lo then
      redis.call('HINCRBY', fw.key, idx(b), tokens)
      -- as long as its own policy would keep it: its longest window plus this quota's lease
      extend(fw.key, fw.keep + tonumber(ttl) - ownwin)
    end
  end
end

-- load takes the bookkeeping fields from r (read by state in the head, in the order of the
-- widths and windows) and returns whether they are this quota's totals, and the extra
-- field's value (nil when absent).
local function load(r, extra)
  -- (a missing field is false, not nil, in a script)
  aexists = (r[1] or r[2] or r[3]) and true or false
  if r[1] then
    reserved = tonumber(r[1])
  end
  if r[2] then
    earliest = tonumber(r[2])
  end
  local valid = r[3] == sig
  for i = 1, #widths do
    if r[3 + i] then
      widths[i].h = tonumber(r[3 + i])
    else
      valid = false
    end
  end
  local o = 3 + #widths
  for j = 1, #windows do
    local tv, lv = r[o + 2 * j - 1], r[o + 2 * j]
    if tv and lv then
      windows[j].t, windows[j].l = tonumber(tv), tonumber(lv)
    else
      valid = false
    end
  end
  local x = nil
  if extra and r[rx] then
    x = estof(r[rx])
  end
  return valid, x
end

-- flush adds each width's pending tokens ('b<w_ms>', read by state in the head) to bucket
-- h<w_ms> of its hash, where the general path reads buckets. The totals already count them.
local function flush(r)
  for i, wd in ipairs(widths) do
    local b, h = r[ob + i], r[3 + i]
    if b and b ~= '0' and h then
      local v = redis.pcall('HINCRBY', wd.key, h, b)
      if type(v) ~= 'number' or v > MAXT then
        redis.call('HSET', wd.key, h, idx(MAXT))
      end
      wd.written, wd.flushed, statechanged, aexists = true, true, true, true
    end
  end
end

-- readall reads a width's hash whole (once per call): its buckets as a list of {index, tokens}.
local function readall(wd)
  if wd.all then
    return wd.all
  end
  local all = redis.call('HGETALL', wd.key)
  local out = {}
  for j = 1, #all, 2 do
    out[#out + 1] = { tonumber(all[j]), tonumber(all[j + 1]) }
  end
  wd.all = out
  return out
end

local function addprune(wd, field)
  prunes = prunes or {}
  local l = prunes[wd]
  if not l then
    l = {}
    prunes[wd] = l
  end
  l[#l + 1] = field
end

-- batched runs cmd on key with the fields of list, 1000 at a time (unpack's stack bound: a
-- sweep may find many leases run out at once) and returns the replies' values in order.
local function batched(cmd, key, list)
  local out = {}
  for i = 1, #list, 1000 do
    local r = redis.call(cmd, key, unpack(list, i, math.min(i + 999, #list)))
    if type(r) == 'table' then
      for k = 1, #r do
        out[#out + 1] = r[k]
      end
    end
  end
  return out
end

-- tombof parses a tombstone field's value: the estimate its expiry charged (a string), '-'
-- when nothing more may be charged, or nil when absent or expired.
local function tombof(v)
  if not v then
    return nil
  end
  local c, e = string.match(v, '^([^:]+):(%d+)$')
  if not c or tonumber(e) <= now then
    return nil
  end
  return c
end

-- tombstone is the value of the call's id's tombstone field (r[rt]: false when absent), read now
-- when state left it for later (settle's fast path needs none).
local function tombstone(r)
  if r[rt] == nil then
    r[rt] = redis.call('HGET', A, '~' .. names[rx])
  end
  return r[rt]
end

-- entomb writes tombstones (list: id, charged, id, charged, ...) expiring in ttl, after
-- deleting the expired ones, and keeps KEYS[1] and the tombstone list alive as long.
local function entomb(list)
  local old = redis.call('ZRANGEBYSCORE', X, '-inf', idx(now))
  if #old > 0 then
    for k = 1, #old do
      old[k] = '~' .. old[k]
    end
    batched('HDEL', A, old)
    redis.call('ZREMRANGEBYSCORE', X, '-inf', idx(now))
  end
  local exp = idx(now + tonumber(ttl))
  local f, z = {}, {}
  for k = 1, #list, 2 do
    f[#f + 1], f[#f + 2] = '~' .. list[k], list[k + 1] .. ':' .. exp
    z[#z + 1], z[#z + 2] = exp, list[k]
  end
  batched('HSET', A, f)
  batched('ZADD', X, z)
  extend(A, ttl)
  extend(X, ttl)
end

-- rebuild recomputes every total of this quota from the width hashes (when 'v' names another
-- quota's totals or fields are missing) and drops buckets older than each width's longest
-- window.
local function rebuild()
  for _, wd in ipairs(widths) do
    local h = nil
    for _, b in ipairs(readall(wd)) do
      if b[1] < wd.lo then
        addprune(wd, idx(b[1]))
      elseif h == nil or b[1] > h then
        h = b[1]
      end
    end
    wd.h = h or (wd.lo - 1) -- no bucket above h: below every window when there is none
  end
  for _, win in ipairs(windows) do
    local s = 0
    for _, b in ipairs(win.wd.all) do
      if b[1] >= win.lo then
        s = s + b[2]
      end
    end
    win.t, win.l, win.dirty = s, win.lo, true
  end
  for _, wd in ipairs(widths) do
    -- the totals become this quota's: its TTL on every bucket hash (see the fast path of
    -- settle.lua, which renews a bucket hash's TTL only when it creates a bucket)
    wd.dirty, wd.written = true, true
  end
  statechanged, vdirty = true, true
end

-- advance moves each window's watermark to its low end at now, subtracting the buckets that
-- left (read with one HMGET of exactly their indices; at most the buckets of one window).
local function advance()
  for _, win in ipairs(windows) do
    local wd = win.wd
    if win.lo > win.l then
      if wd.h == nil or win.lo > wd.h then
        -- nothing at or above the new low end: everything this total counted has left
        if win.prune and wd.h ~= nil and win.t ~= 0 then
          for b = win.l, wd.h do
            addprune(wd, idx(b))
          end
        end
        win.t = 0
      else
        local f = {}
        for b = win.l, win.lo - 1 do
          f[#f + 1] = idx(b)
        end
        local vals = batched('HMGET', wd.key, f)
        local s = 0
        for k = 1, #vals do
          if vals[k] then
            s = s + tonumber(vals[k])
            if win.prune then
              addprune(wd, f[k])
            end
          end
        end
        win.t = win.t - s
      end
      win.l = win.lo
      win.dirty, statechanged = true, true
    elseif win.lo < win.l then
      win.exact = true -- the store clock went back: count the buckets themselves
    end
  end
end

-- charge adds tokens to bucket b of width wd and to every total counting it. Returns whether
-- it wrote (a bucket older than the width's longest window is outside every window). The
-- increment saturates instead of failing on overflow: an error here would abort the script
-- after some of its writes.
local function charge(wd, b, tokens)
  if b < wd.lo then
    return false
  end
  tokens = math.max(0, math.min(tonumber(tokens), MAXT))
  local r = redis.pcall('HINCRBY', wd.key, idx(b), idx(tokens))
  if type(r) ~= 'number' or r > MAXT then
    redis.call('HSET', wd.key, idx(b), idx(MAXT))
  end
  wd.written = true
  if b > wd.h then
    wd.h, wd.dirty = b, true
  end
  if wd.all then
    wd.all[#wd.all + 1] = { b, tonumber(tokens) }
  end
  for _, win in ipairs(windows) do
    if win.wd == wd and b >= win.l then
      win.t, win.dirty = win.t + tonumber(tokens), true
    end
  end
  return true
end

-- live reads KEYS[1] whole and returns its reservations as a list of { id, estimate (a
-- string), deadline }.
local function live()
  local all = redis.call('HGETALL', A)
  local out = {}
  for k = 1, #all, 2 do
    local est, dl = string.match(all[k + 1], '^(%d+) (%d+)$')
    if est then
      out[#out + 1] = { all[k], est, tonumber(dl) }
    end
  end
  return out
end

-- sweep charges every reservation whose lease ran out (deadline <= now) at its estimate, in the
-- bucket of its deadline, and frees its hold. It runs only when the earliest deadline may have
-- passed ('e'), and sets 'e' to the earliest deadline left. Returns true when it charged or
-- freed anything.
local function sweep()
  if earliest ~= nil and earliest > now then
    return false
  end
  local ids, exp, ne = {}, {}, nil
  for _, x in ipairs(live()) do
    if x[3] <= now then
      ids[#ids + 1] = x[1]
      exp[#exp + 1] = x
    elseif ne == nil or x[3] < ne then
      ne = x[3]
    end
  end
  local changed = false
  if #ids > 0 then
    -- Removed before they are charged: should anything below fail, an id is never left live
    -- to be charged again by the next sweep.
    batched('HDEL', A, ids)
    gone = {}
    local freed = 0
    local tombs = {}
    for _, x in ipairs(exp) do
      local id, est, dl = x[1], x[2], x[3]
      gone[id] = est
      tombs[#tombs + 1], tombs[#tombs + 2] = id, est
      for _, wd in ipairs(widths) do
        charge(wd, floor(dl / wd.w), est)
      end
      chargeforeign(dl, est)
      freed = freed + tonumber(est)
    end
    entomb(tombs)
    reserved, rdirty = reserved - freed, true
    changed = true
  end
  ne = ne or tonumber(NONE)
  if earliest == nil or ne ~= earliest then
    statechanged, edirty = true, true
  end
  earliest = ne
  return changed
end

-- prepare takes the state r read by the head, brings the totals to now and sweeps. Returns
-- the extra field's value (nil when absent or removed by the sweep) and whether the sweep
-- changed anything.
local function prepare(r, extra)
  local valid, x = load(r, extra)
  flush(r)
  if valid then
    advance()
  else
    rebuild()
  end
  for _, win in ipairs(windows) do
    if win.wd.h > win.wd.cur then
      win.exact = true -- a bucket newer than now (the clock went back) counts as now
    end
  end
  local swept = sweep()
  if x and gone and gone[extra] then
    x = nil
  end
  return x, swept
end

-- settled is the usage window win counts at now. A bucket newer than now (the store clock
-- stepped back, e.g. after a failover to a node whose clock is behind) counts as now: recent
-- usage is never forgotten.
local function settled(win)
  if not win.exact then
    return win.t
  end
  local lo = win.lo
  local s = 0
  for _, b in ipairs(readall(win.wd)) do
    if b[1] >= lo then
      s = s + b[2]
    end
  end
  return s
end

-- buckets lists the non-empty buckets window win counts at now, sorted by index; one newer
-- than now is listed as now's.
local function buckets(win)
  local lo, hi = win.lo, win.wd.cur
  local out = {}
  for _, b in ipairs(readall(win.wd)) do
    if b[1] >= lo and b[2] ~= 0 then
      out[#out + 1] = { math.min(b[1], hi), b[2] }
    end
  end
  table.sort(out, function(x, y) return x[1] < y[1] end)
  -- merge duplicates (a bucket charged again after the hash was read)
  local m = {}
  for _, b in ipairs(out) do
    if #m > 0 and m[#m][1] == b[1] then
      m[#m] = { b[1], m[#m][2] + b[2] }
    else
      m[#m + 1] = b
    end
  end
  return m
end

-- commit persists the changed bookkeeping fields of KEYS[1] when the call wrote KEYS[1] (write)
-- or changed the totals of an existing KEYS[1], deletes the buckets that left their width's
-- longest window (only together with the totals that no longer count them), and renews TTLs:
-- of KEYS[1] when touch (a reservation was added or renewed) or when this call created it, and
-- of every bucket hash written. extra: field/value pairs of KEYS[1] to set as well. A KEYS[1]
-- that outlives its buckets is harmless (h < lo counts them empty); one that expires first
-- loses 'v', and the next call rebuilds the totals from the buckets.
local function commit(write, touch, extra)
  if not (write or (statechanged and aexists)) then
    return
  end
  local f = extra or {}
  if rdirty then
    f[#f + 1] = '#'
    f[#f + 1] = idx(reserved)
  end
  if edirty then
    f[#f + 1] = 'e'
    f[#f + 1] = idx(earliest)
  end
  if vdirty then
    f[#f + 1] = 'v'
    f[#f + 1] = sig
  end
  if newM then
    f[#f + 1] = 'M'
    f[#f + 1] = newM
  end
  for _, wd in ipairs(widths) do
    if wd.dirty then
      f[#f + 1] = wd.hf
      f[#f + 1] = idx(wd.h)
    end
    if wd.flushed then
      f[#f + 1] = wd.bf
      f[#f + 1] = '0'
    end
  end
  for _, win in ipairs(windows) do
    if win.dirty then
      f[#f + 1] = win.tf
      f[#f + 1] = idx(win.t)
      f[#f + 1] = win.lf
      f[#f + 1] = idx(win.l)
    end
  end
  if #f > 0 then
    redis.call('HSET', A, unpack(f))
  end
  if prunes then
    for wd, l in pairs(prunes) do
      batched('HDEL', wd.key, l)
    end
  end
  if touch or not aexists then
    extend(A, ttl)
  end
  for _, wd in ipairs(widths) do
    if wd.written then
      extend(wd.key, ttl)
    end
  end
end
