-- inspect: ARGV[base+1] nbudgets, then per budget: window slot.
-- Returns {active reservations, reserved tokens, settled_1, settled_2, ...}.
local nb = tonumber(ARGV[base + 1])

-- @state

local r = state(nil)

-- @common

local _, swept = prepare(r, nil)
commit(swept, false)
local out = { #live(), reserved }
for i = 1, nb do
  out[#out + 1] = settled(windows[tonumber(ARGV[base + 1 + i])])
end
return out
