-- Takes the lock from whoever holds it (an operator's tool). The fence
-- moves on, so that the holder's release or renewal says it lost the lock
-- rather than that it merely expired.
-- KEYS: lock, queue, fence. ARGV: the value the caller found under the
-- lock key and judged (only that is removed), the wake lists' prefix, a
-- waiter's lease in ms, and the time (server ms, 0: none) after which the
-- caller no longer waits for this answer: a break held up in a stopped
-- server must not take the lock from whoever holds it when the server
-- resumes.
-- Returns 1 if the value was removed, 0 if the lock was free, 'changed' if
-- it holds another value now, 'late', or 'foreign' / 'fence' if a key holds
-- something this library never writes (left alone).
local lock, queue, fence_key = KEYS[1], KEYS[2], KEYS[3]
local judged = ARGV[1]
local now_ms, now_us = server_time()
if too_late(tonumber(ARGV[4]), now_ms) then
  return 'late'
end
if not types_fit({[lock] = 'string', [fence_key] = 'string', [queue] = 'list'}) then
  return 'foreign'
end
local current = redis.call('GET', lock)
if not current then
  return 0
end
if current ~= judged then
  return 'changed'
end
local last = last_fence(fence_key)
if not last then
  return 'fence'
end
redis.call('SET', fence_key, next_fence(last, now_us))
redis.call('DEL', lock)
wake_head(queue, ARGV[2], tonumber(ARGV[3]))
return 1
