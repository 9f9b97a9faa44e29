-- What every script of a redis lock shares. The keys of one lock carry
-- one hash tag, so that a cluster keeps them in one slot; a waiter's wake
-- list is named by the prefix it is given and the waiter's id.
local COOLDOWN = 'lockcore-cooldown'
local MARKER = 'lockcore 2 '

-- No record of this library is longer (RECORD_CAPACITY).
local LONGEST_RECORD = 512

-- Whether a value of the lock key is one this library writes.
local function ours(value)
  return value == COOLDOWN or (#value <= LONGEST_RECORD and string.sub(value, 1, #MARKER) == MARKER)
end

-- The server's clock, in milliseconds and in microseconds.
local function server_time()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

-- Wakes the first waiter in line: one element in its wake list, where its
-- blocking pop finds it, or finds it at once when it comes back to wait.
local function wake_head(queue, wake_prefix, lease_ms)
  local head = redis.call('LINDEX', queue, 0)
  if head then
    local wake = wake_prefix .. head
    if redis.call('LLEN', wake) == 0 then
      redis.call('RPUSH', wake, '1')
    end
    redis.call('PEXPIRE', wake, lease_ms)
  end
end

-- The last fencing token handed out, as a number; nil when the key holds
-- something no acquisition wrote (or a token so large that one more could
-- not be told from it in a Lua number).
local function last_fence(fence_key)
  local text = redis.call('GET', fence_key)
  if not text then
    return 0
  end
  local n = tonumber(text)
  if not n or n < 0 or n >= 9007199254740000 or string.find(text, '^%d+$') == nil then
    return nil
  end
  return n
end
