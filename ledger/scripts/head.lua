-- quotaqual ledger: the head of every script (ledger/valkey.go prepends it, puts state.lua
-- where a script says "-- @state" and common.lua where it says "-- @common"; common.lua
-- describes the keys, fields and ARGV). The head reads the store clock and the layout's
-- counts; state.lua reads, in one HMGET, every bookkeeping field of KEYS[1] the call needs. A
-- script's fast path decides from that alone when the totals are current (see current);
-- otherwise it falls through to common.lua's general machinery, which starts from the same
-- read. The fast paths are the general path's own arithmetic with everything known to be a
-- no-op left out: no lease ran out, no watermark moves, no bucket is newer than now.
-- Reserve and settle have a fast path of their own for the usual layout (one bucket width,
-- one window, one budget) before "-- @state": straight-line code on the same fields, without
-- the loops, tables and closures of the general layout (which cost the store as much as its
-- commands do). What it read, state reuses. The head defines no function: a function
-- statement builds a closure (and its upvalues) on every call that passes it, so the helpers
-- (idx, extend, estof, hold, unpend) are defined after "-- @state", and a fast path writes
-- its few values inline; its rare cases (a TTL renewal, a new earliest deadline, a pending
-- bucket to move) go on to the fast path of every other layout.
-- The globals the fast paths use, read once (each use of a global is a table lookup).
-- The fast paths turn a number's text into a number with arithmetic ("x + 0"): one strtod,
-- where tonumber(x) makes two (it checks, then converts). A conversion is some five hundred
-- instructions, and with the commands and the string interning the bulk of a fast path's time.
local tonumber, ARGV, KEYS, format = tonumber, ARGV, KEYS, string.format
local floor = math.floor
local t = redis.call('TIME')
local now = t[1] * 1000 + floor(t[2] / 1000)
local A = KEYS[1]
local nwd = #KEYS - 2 -- width i: KEYS[1 + i] its bucket hash, ARGV[2 + 2i] width_ms, ARGV[3 + 2i] max_window_ms
local X = KEYS[2 + nwd] -- tombstone expiries (see common.lua)
local wbase = 4 + 2 * nwd -- ARGV[wbase] nwindows; window j: ARGV[wbase - 1 + 2j] window_ms,
-- ARGV[wbase + 2j] its width slot. A string compares with a constant by address: the usual
-- one window costs no conversion.
local nwin = ARGV[wbase] == '1' and 1 or ARGV[wbase] + 0
local base = wbase + 2 * nwin
-- MAXT is 2^53, the largest capacity and the largest integer a Lua number holds exactly: one
-- charge and one bucket saturate there (beyond it every window is full anyway).
local MAXT = 9007199254740992

