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

-- What the key that keeps the last holder's record for the next taker
-- holds (`<fence>\n<record>`, or `<fence> dead\n<record>` for a holder
-- broken as dead): that fence, record and 'expired' or 'dead', as this
-- library wrote them; nil when the key is absent; false when it holds
-- anything else, of any type (read without failing on one).
local function last_taken_at(key)
  local text = redis.pcall('GET', key)
  if not text then
    return nil
  end
  local at, how, record
  if type(text) == 'string' then
    at, how, record = string.match(text, '^(%d+)([^\n]*)\n(.*)$')
  end
  if at and (how == '' or how == ' dead') and record ~= COOLDOWN and ours(record) then
    return at, record, how == '' and 'expired' or 'dead'
  end
  return false
end

-- How long the last release is remembered, for its caller to ask again
-- after the answer was lost.
local RELEASE_REMEMBERED_MS = 60000

-- What the key that remembers the last release holds (`<fence>\n<record>`):
-- that fence and record; nil when the key is absent; false when it holds
-- anything else, of any type.
local function released_at(key)
  local text = redis.pcall('GET', key)
  if not text then
    return nil
  end
  local at, record
  if type(text) == 'string' then
    at, record = string.match(text, '^(%d+)\n(.*)$')
  end
  if at and record ~= COOLDOWN and ours(record) then
    return at, record
  end
  return false
end

-- The server's clock, in milliseconds and in microseconds.
local function server_time()
  local t = redis.call('TIME')
  local s, us = tonumber(t[1]), tonumber(t[2])
  return s * 1000 + math.floor(us / 1000), s * 1000000 + us
end

-- Whether every key of `expected` (key -> type) is absent or of the type
-- this library gives it. Checked before a script's first write: Redis does
-- not undo what a script wrote before it failed.
local function types_fit(expected)
  for key, kind in pairs(expected) do
    local found = redis.call('TYPE', key)['ok']
    if found ~= 'none' and found ~= kind then
      return false
    end
  end
  return true
end

-- Whether a request that carries `given_up_at` (server ms, 0: none) came
-- after its caller stopped waiting for the answer: held up in a stopped
-- server's buffers, it must not act for a caller that has moved on.
local function too_late(given_up_at, now_ms)
  return given_up_at > 0 and now_ms > given_up_at
end

-- Wakes the first waiter in line: one element in its wake list, where its
-- blocking pop finds it, or finds it at once when it comes back to wait.
-- The list lives as long as a waiter's lease. A wake list that holds
-- anything but one wake-up not yet taken was planted, and is left alone,
-- its expiry too; its waiter comes back at the end of its slice all the
-- same.
local function wake_head(queue, wake_prefix, lease_ms)
  local head = redis.call('LINDEX', queue, 0)
  if not head then
    return
  end
  local wake = wake_prefix .. head
  local waiting = redis.pcall('LLEN', wake)
  if waiting == 0 then
    redis.call('RPUSH', wake, '1')
  elseif waiting ~= 1 or redis.call('LINDEX', wake, 0) ~= '1' then
    return
  end
  redis.call('PEXPIRE', wake, lease_ms)
end

-- The next fencing token after `last`: one more, and never below the
-- server's clock in microseconds, so that a server that lost its data (a
-- restart without persistence, a flush) still hands out greater ones.
local function next_fence(last, now_us)
  return string.format('%.0f', math.max(last + 1, now_us))
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

-- What became of the acquisition whose record starts with `identity`
-- (owner, nonce, fence) and whose fence is `fence`: 'ours' (the lock holds
-- it, perhaps renewed since; its record comes second), 'expired' (its key
-- is gone and nobody took the lock since: the fence is still its), or
-- 'lost' (someone else holds the lock, or took it since).
local function fate_of(lock, fence_key, identity, fence)
  local current = redis.call('GET', lock)
  if current and string.sub(current, 1, #identity) == identity then
    return 'ours', current
  end
  if current then
    return 'lost'
  end
  local last = last_fence(fence_key)
  if last and last > tonumber(fence) then
    return 'lost'
  end
  return 'expired'
end

-- Takes waiter `id` out of the line, and wakes the new first if the lock
-- is free.
local function leave_line(lock, queue, alive, own_wake, id, wake_prefix, lease_ms)
  redis.call('LREM', queue, 0, id)
  redis.call('ZREM', alive, id)
  redis.call('DEL', own_wake)
  if not redis.call('GET', lock) then
    wake_head(queue, wake_prefix, lease_ms)
  end
end
