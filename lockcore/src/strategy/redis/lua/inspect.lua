-- The lock's state, changing nothing.
-- KEYS: lock, fence, alive.
-- Returns {the lock key's value or '', its pttl, the last fence, live waiters}.
local lock, fence_key, alive = KEYS[1], KEYS[2], KEYS[3]
local now_ms = server_time()
local current = redis.call('GET', lock) or ''
return {current, redis.call('PTTL', lock), redis.call('GET', fence_key) or '0',
        redis.call('ZCOUNT', alive, '(' .. now_ms, '+inf')}
