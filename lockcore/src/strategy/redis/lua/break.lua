-- Takes the lock from whoever holds it (an operator's tool). The fence
-- moves on, so that the holder's release or renewal says it lost the lock
-- rather than that it merely expired.
-- KEYS: lock, queue, fence. ARGV: the wake lists' prefix, a waiter's lease
-- in ms, the caller's clock in microseconds.
-- Returns 1 if a lock was removed, 0 if it was free, 'foreign' if the key
-- holds something this library never writes (left alone).
local lock, queue, fence_key = KEYS[1], KEYS[2], KEYS[3]
local current = redis.call('GET', lock)
if not current then
  return 0
end
if not ours(current) then
  return 'foreign'
end
local last = last_fence(fence_key)
if not last then
  return 'fence'
end
local _, now_us = server_time()
redis.call('SET', fence_key, string.format('%.0f', math.max(last + 1, now_us, tonumber(ARGV[3]))))
redis.call('DEL', lock)
wake_head(queue, ARGV[1], tonumber(ARGV[2]))
return 1
