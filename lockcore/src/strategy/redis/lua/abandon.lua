-- Gives up a waiter's place in line.
-- KEYS: lock, queue, alive, the waiter's wake list. ARGV: its id, the wake
-- lists' prefix, a waiter's lease in ms.
local lock, queue, alive, own_wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
if not types_fit({[lock] = 'string', [queue] = 'list', [alive] = 'zset'}) then
  return 'foreign'
end
redis.call('LREM', queue, 0, ARGV[1])
redis.call('ZREM', alive, ARGV[1])
redis.call('DEL', own_wake)
if not redis.call('GET', lock) then
  wake_head(queue, ARGV[2], tonumber(ARGV[3]))
end
return 1
