-- The lock's state, changing nothing.
-- KEYS: lock, fence, alive.
-- Returns {the lock key's value or '', its pttl, the last fence, live
-- waiters}, or 'foreign' / 'fence' for keys that hold what this library
-- never writes.
local lock, fence_key, alive = KEYS[1], KEYS[2], KEYS[3]
local now_ms = server_time()
if not types_fit({[lock] = 'string', [fence_key] = 'string', [alive] = 'zset'}) then
  return 'foreign'
end
local current = redis.call('GET', lock) or ''
if current ~= '' and not ours(current) then
  return 'foreign'
end
local last = last_fence(fence_key)
if not last then
  return 'fence'
end
return {current, redis.call('PTTL', lock), string.format('%.0f', last),
        redis.call('ZCOUNT', alive, '(' .. now_ms, '+inf')}
